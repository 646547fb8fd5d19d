#pragma once
// TensorBoard event files (DeepSpeed's `tensorboard` section): the trainer's metrics as scalar
// summaries that `tensorboard --logdir` shows.
//
// An event file is a TFRecord file: each record is
//   uint64 length (little endian) | uint32 masked_crc32c(length bytes) | data |
//   uint32 masked_crc32c(data)
// and each record's data is a serialized tensorflow.Event protobuf. The first record carries
// file_version "brain.Event:2"; every later one a Summary of scalar values at one step.
//
// Why no protobuf or TensorFlow dependency: tide writes 4 fields of 3 messages (Event.wall_time,
// Event.step, Event.file_version / Event.summary, Summary.Value.tag / simple_value), so a
// 30-line encoder is simpler than a code generator and a library. crc32c has no Debian
// development package on bookworm (no libcrc32c-dev), so it is a table implementation here,
// checked against the standard test vector (crc32c("123456789") = 0xE3069283).
// tools/check_tensorboard.py loads the files with the `tensorboard` package and compares
// them with metrics.jsonl; tests/unit/train/test_tensorboard.cpp compares the encoding with
// bytes that tensorboard's own protobuf classes wrote.

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tide {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), and TFRecord's masked form
// ((crc >> 15 | crc << 17) + 0xa282ead8).
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

struct Scalar {
  std::string tag;
  float value = 0;
};

// The serialized tensorflow.Event: wall_time (field 1, double), step (2, int64), and
// file_version (3, string) when it is not empty, else a summary (5) of `scalars` (Summary.value
// (1) = {tag (1), simple_value (2, float)}). Fields equal to their default are left out, as
// protobuf itself does.
std::string encode_event(double wall_time, int64_t step, std::string_view file_version,
                         std::span<const Scalar> scalars = {});
// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it,
  // events.out.tfevents.<unix seconds>.<host>.<pid>, starting with the file_version record.
  explicit TensorBoardWriter(const std::string& dir);

  // One record of scalars at `step`, flushed (a crash loses nothing written).
  void add_scalars(int64_t step, double wall_time, std::span<const Scalar> scalars);
  // A metrics.jsonl line as one record: every number in it except "step" and "time" becomes a
  // scalar tagged with its key, at line["step"], with wall time line["time"].
  void add_metrics(const nlohmann::json& line);

  const std::string& path() const { return path_; }

 private:
  void write(const std::string& record);
  std::string path_;
  std::ofstream f_;
};

}  // namespace tide
