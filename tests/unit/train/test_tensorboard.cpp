// TensorBoard event files: CRC-32C against the standard test vector, the encoding against bytes
// that TensorBoard's own protobuf classes and RecordWriter wrote (tests/fixtures/
// tensorboard_events.bin, from tools/check_tensorboard.py --fixture), and a training run's
// event file decoded record by record (framing, both CRCs, Event and Summary fields) and
// compared with its metrics.jsonl.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "test_files.h"
#include "tide/data/shard.h"
#include "tide/train/tensorboard_writer.h"
#include "tide/train/trainer.h"

using namespace tide;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// --- a decoder written for the test, independent of the encoder ------------------------------
struct Reader {
  std::string_view b;
  size_t at = 0;
  bool done() const { return at >= b.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= b.size() || shift > 63) throw std::runtime_error("bad varint");
      const auto byte = static_cast<uint8_t>(b[at++]);
      v |= uint64_t{byte & 0x7fu} << shift;
      if (!(byte & 0x80)) return v;
    }
  }
  template <typename T>
  T fixed() {
    if (at + sizeof(T) > b.size()) throw std::runtime_error("truncated fixed field");
    T v;
    std::memcpy(&v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (at + n > b.size()) throw std::runtime_error("truncated bytes field");
    const std::string_view s = b.substr(at, n);
    at += n;
    return s;
  }
};

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

DecodedEvent decode_event(std::string_view data) {
  DecodedEvent e;
  Reader r{data};
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 1) {
      e.wall_time = r.fixed<double>();
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && wire == 2) {
      e.file_version = std::string(r.bytes());
    } else if (field == 5 && wire == 2) {
      Reader s{r.bytes()};
      while (!s.done()) {
        if (s.varint() != (1 << 3 | 2)) throw std::runtime_error("Summary: not a value");
        Reader v{s.bytes()};
        std::string tag;
        float value = NAN;
        while (!v.done()) {
          const uint64_t k = v.varint();
          if (k == (1 << 3 | 2))
            tag = std::string(v.bytes());
          else if (k == (2 << 3 | 5))
            value = v.fixed<float>();
          else
            throw std::runtime_error("Summary.Value: unexpected field");
        }
        e.values.emplace_back(tag, value);
      }
    } else {
      throw std::runtime_error("Event: unexpected field");
    }
  }
  return e;
}

// The records of a TFRecord file, their CRCs checked.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  Reader r{bytes};
  while (!r.done()) {
    const size_t head = r.at;
    const auto n = r.fixed<uint64_t>();
    EXPECT_EQ(r.fixed<uint32_t>(), masked_crc32c(bytes.data() + head, 8)) << "length CRC";
    if (r.at + n + 4 > bytes.size()) throw std::runtime_error("truncated record");
    out.emplace_back(bytes.substr(r.at, n));
    r.at += n;
    EXPECT_EQ(r.fixed<uint32_t>(), masked_crc32c(out.back().data(), n)) << "data CRC";
  }
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cMatchesTheStandardTestVector) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // RFC 3720 / iSCSI check value
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of 0
  // The mask TFRecord applies.
  const uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, EncodingEqualsTensorBoardsOwnBytes) {
  // The events of tools/check_tensorboard.py's FIXTURE_EVENTS.
  const std::vector<Scalar> s1 = {{"loss", 2.5f}, {"lr", 0.001f}};
  const std::vector<Scalar> s2 = {
      {"tokens_per_s_interval", 12345.678f}, {"val_loss", -0.0f}, {"zero", 0.0f}};
  const std::vector<Scalar> s3 = {{std::string(130, 'x'), 1e30f}};
  const std::string mine = tfrecord(encode_event(1700000000.5, 0, "brain.Event:2")) +
                           tfrecord(encode_event(1700000001.25, 7, "", s1)) +
                           tfrecord(encode_event(1700000123.0, 300, "", s2)) +
                           tfrecord(encode_event(1700000200.0, 123456789012, "", s3));
  const std::string ref =
      test::slurp(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tensorboard_events.bin");
  ASSERT_FALSE(ref.empty()) << "tests/fixtures/tensorboard_events.bin is missing";
  EXPECT_EQ(mine.size(), ref.size());
  EXPECT_TRUE(mine == ref) << "the bytes differ from TensorBoard's";
  // The decoder reads its own fixture back (so the run test below decodes correctly).
  const std::vector<std::string> recs = read_records(ref);
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(decode_event(recs[0]).file_version, "brain.Event:2");
  const DecodedEvent e = decode_event(recs[3]);
  EXPECT_EQ(e.step, 123456789012);
  EXPECT_EQ(e.wall_time, 1700000200.0);
  ASSERT_EQ(e.values.size(), 1u);
  EXPECT_EQ(e.values[0].second, 1e30f);
}

TEST(TensorBoard, TrainingRunWritesEveryMetricAsAScalar) {
  const std::string dir = test::temp_dir("run");
  const std::vector<std::string> o = {
      "data.train=" + test::write_pattern_shard(dir, "train.bin", 3000, 40),
      "data.val=" + test::write_pattern_shard(dir, "val.bin", 600, 40),
      "model.vocab_size=40",
      "model.n_layer=1",
      "model.n_head=2",
      "model.n_embd=16",
      "seq_len=8",
      "train_micro_batch_size_per_gpu=2",
      "train_steps=5",
      "log.interval=2",
      "eval.interval=3",
      "eval.sequences=4",
      "log.progress=false",
      "out_dir=" + dir + "/out",
      "tensorboard.enabled=true",
      "tensorboard.output_path=" + dir + "/tb",
      "tensorboard.job_name=job1"};
  Trainer(load_train_config("", o)).run();
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(dir + "/tb/job1"))
    if (f.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  const std::vector<std::string> recs = read_records(test::slurp(files[0]));
  std::vector<json> lines;
  std::ifstream metrics(dir + "/out/metrics.jsonl");
  for (std::string l; std::getline(metrics, l);) lines.push_back(json::parse(l));
  // Steps 2, 4, 5 (log.interval 2 and the last), validation at 0, 3 and 5.
  ASSERT_EQ(lines.size(), 6u);
  ASSERT_EQ(recs.size(), lines.size() + 1);
  const DecodedEvent first = decode_event(recs[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_GT(first.wall_time, 1.6e9);
  int scalars = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const DecodedEvent e = decode_event(recs[i + 1]);
    EXPECT_EQ(e.step, lines[i]["step"].get<int64_t>());
    EXPECT_EQ(e.wall_time, lines[i]["time"].get<double>());
    ASSERT_EQ(e.values.size(), lines[i].size() - 2) << lines[i].dump();  // all but step, time
    for (const auto& [tag, value] : e.values) {
      ASSERT_TRUE(lines[i].contains(tag)) << tag;
      EXPECT_EQ(value, lines[i][tag].get<float>()) << tag;
      ++scalars;
    }
    EXPECT_TRUE(lines[i].contains("val_loss") || lines[i].contains("loss"));
  }
  EXPECT_EQ(scalars, 3 * 7 + 3);  // 3 training lines of 7 values, 3 validation losses
}

TEST(TensorBoard, JobNameMustBeOneDirectory) {
  try {
    load_train_config("", {"tensorboard.job_name=a/b"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensorboard.job_name 'a/b' must be one directory name"),
              std::string::npos)
        << e.what();
  }
}
