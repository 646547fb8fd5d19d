#pragma once
// safetensors files with a checked metadata block: tide's one on-disk format for tensors.
//
// Why safetensors: it is what Hugging Face reads and writes, so checkpoints can be exchanged
// with HF without a converter, and it is trivial to parse safely (no pickle, no code). Why a
// checksum on top: the format itself detects no corruption, and a flipped bit in a weight
// trains on silently. The layout, exactly per the spec:
//
//   u64 little-endian N | N bytes of JSON header, space-padded to a multiple of 8 | data
//
//   header = {"__metadata__": {"checksum": "<16 hex>", "format": "tide", "tide": "<JSON>"},
//             "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
//
// `checksum` is XXH3-64 over the N header bytes (with the 16 checksum digits read as '0's)
// followed by all data bytes, so it covers header and data alike. tide writes the checksum as
// the first field of the header ({"__metadata__":{"checksum":"...), which is where the reader
// looks for it. `tide` is the caller's metadata as a JSON string (safetensors metadata values
// must be strings).
//
// Writes are atomic: a temporary beside the target, fsync, rename, fsync of the directory; on
// failure the temporary is removed and an existing file at the path is left untouched.
// Reading verifies every header field and the checksum of the whole file before it returns
// any data; every problem is one tide::Error line naming the file and what is wrong.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "tide/core/tensor.h"

namespace tide {

// One tensor to write: `data` points at shape.numel() * dtype_size(dtype) contiguous bytes in
// host memory; or, with `data` null, `read` copies them into the host buffer it is given when
// the writer reaches the tensor (a device tensor: the writer stages one tensor at a time).
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;
  std::function<void(void* host)> read;
};

// The safetensors dtype name ("F32", "BF16", "F16", "I32", "U16").
std::string_view safetensors_dtype_name(DType t);

// Writes `tensors` (in this order) and `metadata` (stored as the "tide" metadata string) to
// `path`, creating its parent directories. Throws a tide::Error naming the path and the cause.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const nlohmann::json& metadata);

// `s` (a name read from a file) fit for a one-line message: control bytes escaped, cut after
// 80 bytes.
std::string printable_name(std::string_view s);

// A tensor in an opened file.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t offset = 0;  // byte offset of the tensor's data in the file
  uint64_t nbytes = 0;
};

// Tag: open a safetensors file another program wrote (Hugging Face's model.safetensors). Its
// structure is checked exactly as tide's own files are (header, dtypes, shapes, offsets tiling
// the data), but it has no checksum to verify (the format has none) and __metadata__, if any,
// is any object of strings; metadata() is that object (or {}).
struct ForeignSafetensors {};

// A safetensors file written by write_safetensors, verified on open (header and checksum:
// the whole file is read once). The file stays open until the reader is destroyed.
class SafetensorsReader {
 public:
  // A file written by another program (see ForeignSafetensors): structure checked, no checksum.
  SafetensorsReader(const std::string& path, std::string what, ForeignSafetensors);
  // `what` names the file in error messages ("checkpoint" -> "checkpoint 'x.ckpt' is ...").
  // `verify_checksum` false checks the header only and reads no data: for a writer that must
  // look at the headers of files it has just written (commit_sharded_checkpoint); never for
  // files whose data will be used.
  explicit SafetensorsReader(const std::string& path, std::string what = "safetensors file",
                             bool verify_checksum = true);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // The caller's metadata given to write_safetensors.
  const nlohmann::json& metadata() const { return metadata_; }
  // The tensors in data order (for tide's files, the order they were written in).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // The entry called `name`; throws a tide::Error if there is none.
  const SafetensorsEntry& entry(const std::string& name) const;

  // Copies tensor `name` into `dst` (entry(name).nbytes bytes). Throws a tide::Error when the
  // tensor is missing or its dtype or shape is not the expected one.
  void read(const std::string& name, void* dst, DType expected_dtype,
            const Shape& expected_shape) const;
  // Tensor `e` (an entry of this file) widened to f32: f32 copied, bf16 and f16 converted
  // exactly; another dtype is a tide::Error.
  std::vector<float> read_as_f32(const SafetensorsEntry& e) const;
  // Copies bytes [begin, begin + nbytes) of tensor `name`'s data into `dst`: part of a tensor
  // (sharded checkpoints read only the elements a rank holds). Throws a tide::Error when the
  // tensor is missing or the range is not inside it.
  void read_bytes(const std::string& name, uint64_t begin, uint64_t nbytes, void* dst) const;
  // The checksum stored in (and verified against) the header: 16 lowercase hex digits.
  const std::string& checksum() const { return checksum_; }

 private:
  void open_and_verify(bool verify_checksum, bool foreign);
  void verify_data_checksum(const std::string& zeroed_header, uint64_t data_start,
                            uint64_t data_size, const std::string& stored) const;
  const SafetensorsEntry* find(const std::string& name) const;
  // "checkpoint 'path'", the subject of every error message.
  std::string subject() const;

  std::string path_;
  std::string what_;
  int fd_ = -1;
  nlohmann::json metadata_;
  std::string checksum_;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_
};

}  // namespace tide
