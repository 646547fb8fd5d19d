// TensorBoard event files: a hand-written protobuf encoder for the few fields tide writes, and
// TFRecord framing with CRC-32C (see tensorboard_writer.h for why no library).
#include "tide/train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "tide/core/error.h"

namespace tide {

namespace fs = std::filesystem;

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// --- protobuf wire format: varints, tags, little-endian fixed fields ------------------------
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
// Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit.
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
template <typename T>
void put_fixed(std::string& out, T v) {  // the host is little endian (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string encode_event(double wall_time, int64_t step, std::string_view file_version,
                         std::span<const Scalar> scalars) {
  std::string e;
  if (wall_time != 0) {
    put_tag(e, 1, 1);
    put_fixed(e, wall_time);
  }
  if (step != 0) {
    put_tag(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));  // int64: negative values as 10-byte varints
  }
  if (!file_version.empty()) {
    put_bytes(e, 3, file_version);
    return e;
  }
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_tag(value, 2, 5);
    put_fixed(value, s.value);
    put_bytes(summary, 1, value);
  }
  put_bytes(e, 5, summary);
  return e;
}

std::string tfrecord(std::string_view data) {
  std::string r;
  const uint64_t n = data.size();
  put_fixed(r, n);
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += data;
  put_fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDE_CHECK(!ec && fs::is_directory(dir),
             "tensorboard.output_path '{}': cannot create the directory ({}); choose a writable "
             "one",
             dir, ec ? ec.message() : "not a directory");
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double wall = std::chrono::duration<double>(now).count();
  path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}", static_cast<int64_t>(wall),
                                       host_name(), ::getpid()))
              .string();
  f_.open(path_, std::ios::binary | std::ios::trunc);
  TIDE_CHECK(f_.good(),
             "{}: cannot open for writing; check that tensorboard.output_path is "
             "writable",
             path_);
  write(tfrecord(encode_event(wall, 0, "brain.Event:2")));
}

void TensorBoardWriter::write(const std::string& record) {
  f_.write(record.data(), static_cast<std::streamsize>(record.size()));
  f_.flush();
  TIDE_CHECK(f_.good(),
             "{}: writing an event failed (disk full?); free space or set "
             "tensorboard.enabled=false",
             path_);
}

void TensorBoardWriter::add_scalars(int64_t step, double wall_time,
                                    std::span<const Scalar> scalars) {
  write(tfrecord(encode_event(wall_time, step, "", scalars)));
}

void TensorBoardWriter::add_metrics(const nlohmann::json& line) {
  std::vector<Scalar> scalars;
  for (const auto& [key, value] : line.items())
    if (key != "step" && key != "time" && value.is_number())
      scalars.push_back({key, value.get<float>()});
  add_scalars(line.at("step").get<int64_t>(), line.value("time", 0.0), scalars);
}

}  // namespace tide
