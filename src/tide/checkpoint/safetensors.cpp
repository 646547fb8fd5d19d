// safetensors writer and verifying reader (see safetensors.h for the format). The reader
// treats the file as hostile: every length, type, dim and offset is checked before it is used,
// JSON is only ever looked up with find(), and the checksum of the whole file is verified
// before any tensor can be read, so a damaged or crafted file gives one clear error, never a
// crash or garbage weights.
#include "tide/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

namespace tide {

using json = nlohmann::json;
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "tensor bytes are written as they lie in memory; safetensors is little-endian");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, as in Hugging Face's reader
// tide writes the checksum first, so its 16 digits always sit right after this prefix.
constexpr std::string_view kChecksumPrefix = R"({"__metadata__":{"checksum":")";
constexpr size_t kChecksumDigits = 16;
constexpr const char* kZeroChecksum = "0000000000000000";

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::F32, "F32"},
                                 {DType::BF16, "BF16"},
                                 {DType::F16, "F16"},
                                 {DType::I32, "I32"},
                                 {DType::U16, "U16"}};

bool parse_dtype_name(std::string_view s, DType* out) {
  for (const DTypeName& d : kDTypes)
    if (s == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

std::string shown(std::string_view s) {
  return printable_name(s);
}

std::string errno_text() {
  return std::strerror(errno);
}

struct XxhState {
  XXH3_state_t* s = XXH3_createState();
  XxhState() {
    TIDE_CHECK(s != nullptr, "out of memory (XXH3 state)");
    XXH3_64bits_reset(s);
  }
  ~XxhState() { XXH3_freeState(s); }
  XxhState(const XxhState&) = delete;
  XxhState& operator=(const XxhState&) = delete;
  void update(const void* p, size_t n) { XXH3_64bits_update(s, p, n); }
  std::string hex() const { return fmt::format("{:016x}", XXH3_64bits_digest(s)); }
};

// Reads exactly n bytes at `offset`; false on a short read (end of file) or an error.
bool pread_all(int fd, void* dst, uint64_t n, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Writing

// The temporary file of one save: removed unless the save completed.
struct TempFile {
  std::string path;
  int fd = -1;
  bool committed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!committed) ::unlink(path.c_str());
  }
};

void write_all(TempFile& f, const void* data, size_t n, const std::string& target) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(f.fd, p, std::min<size_t>(n, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0)
      TIDE_FAIL("writing '{}' failed: {}; check the free space on its disk", target, errno_text());
    if (put == 0)
      TIDE_FAIL("writing '{}' failed: no bytes written (disk full?); check the free space", target);
    p += put;
    n -= static_cast<size_t>(put);
  }
}

std::string dump_or_fail(const auto& j, const std::string& path, const char* what) {
  try {
    return j.dump();
  } catch (const json::exception&) {
    TIDE_FAIL("cannot write '{}': {} is not valid UTF-8; use UTF-8 names and strings", path, what);
  }
}

// ---------------------------------------------------------------------------------------------
// Reading: typed access to untrusted JSON.

// A non-negative JSON integer no larger than `max`; false otherwise.
bool get_count(const json& j, uint64_t max, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return *out <= max;
  }
  return false;  // negative integers, floats, anything else
}

}  // namespace

std::string printable_name(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, s[i]);
  }
  if (s.size() > 80) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string_view safetensors_dtype_name(DType t) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const json& metadata) {
  TIDE_CHECK(!path.empty(), "cannot write a safetensors file to an empty path");
  // The header, in order: the metadata first (the checksum its first field), then the tensors.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = nlohmann::ordered_json::object();
  header["__metadata__"]["checksum"] = kZeroChecksum;
  header["__metadata__"]["format"] = "tide";
  header["__metadata__"]["tide"] = dump_or_fail(metadata, path, "the metadata");
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    TIDE_CHECK(t.name != "__metadata__" && !header.contains(t.name),
               "cannot write '{}': tensor name '{}' is {}; give every tensor its own name", path,
               shown(t.name), t.name == "__metadata__" ? "reserved" : "used twice");
    TIDE_CHECK(t.shape.ndim >= 0 && t.shape.ndim <= kMaxDims,
               "cannot write '{}': tensor '{}' has {} dims (at most {})", path, shown(t.name),
               t.shape.ndim, kMaxDims);
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int d = 0; d < t.shape.ndim; ++d) {
      TIDE_CHECK(t.shape.dims[d] >= 0, "cannot write '{}': tensor '{}' has shape {}", path,
                 shown(t.name), t.shape.str());
      shape.push_back(t.shape.dims[d]);
    }
    const uint64_t nbytes = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    TIDE_CHECK(t.data != nullptr || t.read || nbytes == 0,
               "cannot write '{}': tensor '{}' has no data", path, shown(t.name));
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype);
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + nbytes});
    header[t.name] = std::move(entry);
    offset += nbytes;
  }
  std::string text = dump_or_fail(header, path, "a tensor name");
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the spec's padding: data starts 8-aligned
  TIDE_ASSERT(text.starts_with(kChecksumPrefix));

  std::error_code ec;
  const fs::path target(path);
  if (fs::is_directory(target, ec))
    TIDE_FAIL("cannot write '{}': it is a directory; pass the path of a file", path);
  const fs::path dir = target.parent_path();
  if (!dir.empty()) {
    fs::create_directories(dir, ec);
    if (ec)
      TIDE_FAIL("cannot write '{}': cannot create its directory '{}': {}", path, dir.string(),
                ec.message());
  }
  TempFile tmp;
  tmp.path = fmt::format("{}.tmp.{}", path, ::getpid());
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tmp.fd < 0) {
    tmp.committed = true;  // nothing was created: nothing to remove (and never someone else's)
    TIDE_FAIL("cannot write '{}': cannot create '{}': {}; check the directory is writable", path,
              tmp.path, errno_text());
  }

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  write_all(tmp, len, 8, path);
  write_all(tmp, text.data(), text.size(), path);
  XxhState hash;
  hash.update(text.data(), text.size());
  std::vector<std::byte> staged;  // a tensor given by `read` (grows to the largest)
  for (const SafetensorsTensor& t : tensors) {
    const size_t n = static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype);
    const void* bytes = t.data;
    if (bytes == nullptr && n > 0) {
      if (staged.size() < n) staged.resize(n);
      t.read(staged.data());
      bytes = staged.data();
    }
    write_all(tmp, bytes, n, path);
    hash.update(bytes, n);
  }
  // The checksum's digits go into the header written above (the data is not read twice).
  const std::string digits = hash.hex();
  const off_t at = static_cast<off_t>(8 + kChecksumPrefix.size());
  if (::pwrite(tmp.fd, digits.data(), kChecksumDigits, at) != static_cast<ssize_t>(kChecksumDigits))
    TIDE_FAIL("writing '{}' failed: {}", path, errno_text());
  if (::fsync(tmp.fd) != 0) TIDE_FAIL("writing '{}' failed: fsync: {}", path, errno_text());
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) TIDE_FAIL("writing '{}' failed: close: {}", path, errno_text());
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    TIDE_FAIL("cannot write '{}': renaming '{}' over it failed: {}", path, tmp.path, errno_text());
  tmp.committed = true;
  // The rename is durable only once the directory entry is on disk.
  const std::string dir_name = dir.empty() ? "." : dir.string();
  const int dfd = ::open(dir_name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    TIDE_FAIL("wrote '{}' but cannot open its directory to sync it: {}", path, errno_text());
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL)  // EINVAL: the file system cannot sync directories
    TIDE_FAIL("wrote '{}' but syncing its directory failed: {}", path, std::strerror(err));
}

// ---------------------------------------------------------------------------------------------

std::string SafetensorsReader::subject() const {
  return fmt::format("{} '{}'", what_, path_);
}

SafetensorsReader::SafetensorsReader(const std::string& path, std::string what,
                                     bool verify_checksum)
    : path_(path), what_(std::move(what)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TIDE_CHECK(fd_ >= 0, "cannot open {}: {}; check the path", subject(), errno_text());
  try {
    open_and_verify(verify_checksum, /*foreign=*/false);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::SafetensorsReader(const std::string& path, std::string what, ForeignSafetensors)
    : path_(path), what_(std::move(what)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TIDE_CHECK(fd_ >= 0, "cannot open {}: {}; check the path", subject(), errno_text());
  try {
    open_and_verify(/*verify_checksum=*/false, /*foreign=*/true);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::open_and_verify(bool verify_checksum, bool foreign) {
  const std::string who = subject();
  const std::string damaged = "the file is damaged or not a safetensors file";
  struct stat st {};
  TIDE_CHECK(::fstat(fd_, &st) == 0, "cannot read {}: {}", who, errno_text());
  TIDE_CHECK(!S_ISDIR(st.st_mode), "{} is a directory; pass the path of a file", who);
  TIDE_CHECK(S_ISREG(st.st_mode), "{} is not a regular file; pass the path of a file", who);
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  // 1. The header length and the header text.
  TIDE_CHECK(size >= 8, "{} is truncated: {} bytes, fewer than the 8 of its header length; {}", who,
             size, damaged);
  unsigned char len_bytes[8];
  TIDE_CHECK(pread_all(fd_, len_bytes, 8, 0), "cannot read {}: {}", who, errno_text());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  TIDE_CHECK(n <= kMaxHeaderBytes,
             "{} declares a header of {} bytes, more than the 100 MiB limit; {}", who, n, damaged);
  TIDE_CHECK(n <= size - 8,
             "{} is truncated: its header length is {} bytes but only {} bytes follow; {}", who, n,
             size - 8, damaged);
  std::string text(n, '\0');
  TIDE_CHECK(pread_all(fd_, text.data(), n, 8), "{} is truncated inside its header", who);
  const uint64_t data_start = 8 + n, data_size = size - data_start;

  // 2. The JSON.
  json h;
  try {
    h = json::parse(text);
  } catch (const json::parse_error& e) {
    TIDE_FAIL("{}: its header is not valid JSON (error at byte {} of {}); {}", who, e.byte, n,
              damaged);
  } catch (const json::exception&) {
    TIDE_FAIL("{}: its header is not valid JSON; {}", who, damaged);
  }
  TIDE_CHECK(h.is_object(), "{}: its header is a JSON {}, not an object; {}", who, h.type_name(),
             damaged);

  // 3. tide's metadata block (another program's file: any object of strings, or none).
  const auto meta = h.find("__metadata__");
  if (foreign && meta != h.end()) {
    TIDE_CHECK(meta->is_object(), "{}: __metadata__ is a JSON {}, not an object; {}", who,
               meta->type_name(), damaged);
    for (const auto& [key, value] : meta->items())
      TIDE_CHECK(value.is_string(), "{}: __metadata__ '{}' is a JSON {}, not a string; {}", who,
                 shown(key), value.type_name(), damaged);
  }
  TIDE_CHECK(foreign || meta != h.end(),
             "{} has no __metadata__ in its header, so no checksum to verify; tide reads the "
             "safetensors files it wrote itself",
             who);
  std::string stored, tide_text;
  if (!foreign) {
    TIDE_CHECK(meta->is_object(), "{}: __metadata__ is a JSON {}, not an object; {}", who,
               meta->type_name(), damaged);
    for (const auto& [key, value] : meta->items())
      TIDE_CHECK(value.is_string(), "{}: __metadata__ '{}' is a JSON {}, not a string; {}", who,
                 shown(key), value.type_name(), damaged);
    auto meta_string = [&](const char* key) -> const std::string& {
      const auto it = meta->find(key);
      TIDE_CHECK(it != meta->end(),
                 "{}: __metadata__ has no '{}'; tide reads the safetensors files it wrote itself",
                 who, key);
      return it->get_ref<const std::string&>();
    };
    const std::string& format = meta_string("format");
    TIDE_CHECK(format == "tide",
               "{}: __metadata__ 'format' is '{}', not 'tide'; tide reads the safetensors files it "
               "wrote itself",
               who, shown(format));
    stored = meta_string("checksum");
    tide_text = meta_string("tide");
    TIDE_CHECK(
        stored.size() == kChecksumDigits &&
            std::all_of(stored.begin(), stored.end(),
                        [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }),
        "{}: __metadata__ 'checksum' is '{}', not 16 lowercase hex digits; {}", who, shown(stored),
        damaged);
  }

  // 4. The tensor entries.
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string t = fmt::format("{}: tensor '{}'", who, shown(name));
    TIDE_CHECK(e.is_object(),
               "{} is a JSON {}, not an object with dtype, shape and data_offsets; {}", t,
               e.type_name(), damaged);
    for (const auto& [key, value] : e.items())
      TIDE_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                 "{} has an unexpected key '{}' (only dtype, shape and data_offsets); {}", t,
                 shown(key), damaged);
    const auto dtype = e.find("dtype"), shape = e.find("shape"), offsets = e.find("data_offsets");
    TIDE_CHECK(dtype != e.end(), "{} has no 'dtype'; {}", t, damaged);
    TIDE_CHECK(shape != e.end(), "{} has no 'shape'; {}", t, damaged);
    TIDE_CHECK(offsets != e.end(), "{} has no 'data_offsets'; {}", t, damaged);

    SafetensorsEntry entry;
    entry.name = name;
    TIDE_CHECK(dtype->is_string(), "{}: 'dtype' is a JSON {}, not a string; {}", t,
               dtype->type_name(), damaged);
    TIDE_CHECK(parse_dtype_name(dtype->get_ref<const std::string&>(), &entry.dtype),
               "{} has dtype '{}', which tide does not read (F32, BF16, F16, I32, U16)", t,
               shown(dtype->get_ref<const std::string&>()));

    TIDE_CHECK(shape->is_array(), "{}: 'shape' is a JSON {}, not an array; {}", t,
               shape->type_name(), damaged);
    TIDE_CHECK(shape->size() <= static_cast<size_t>(kMaxDims),
               "{} has {} dims; tide tensors have at most {}", t, shape->size(), kMaxDims);
    uint64_t numel = 1;
    for (const json& d : *shape) {
      TIDE_CHECK(d.is_number_integer(), "{}: 'shape' holds a JSON {}, not an integer; {}", t,
                 d.type_name(), damaged);
      TIDE_CHECK(!d.is_number_integer() || d.is_number_unsigned(),
                 "{} has a negative dim ({}) in its shape; {}", t, d.get<int64_t>(), damaged);
      uint64_t dim = 0;
      TIDE_CHECK(get_count(d, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), &dim) &&
                     !__builtin_mul_overflow(numel, dim, &numel),
                 "{} has an impossibly large shape; {}", t, damaged);
      entry.shape.dims[entry.shape.ndim++] = static_cast<int64_t>(dim);
    }
    uint64_t nbytes = 0;
    TIDE_CHECK(!__builtin_mul_overflow(numel, dtype_size(entry.dtype), &nbytes) &&
                   numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               "{} has an impossibly large shape; {}", t, damaged);

    TIDE_CHECK(offsets->is_array() && offsets->size() == 2,
               "{}: 'data_offsets' must be an array of two integers [begin, end]; {}", t, damaged);
    uint64_t begin = 0, end = 0;
    TIDE_CHECK(get_count((*offsets)[0], std::numeric_limits<uint64_t>::max(), &begin) &&
                   get_count((*offsets)[1], std::numeric_limits<uint64_t>::max(), &end),
               "{}: 'data_offsets' must be two non-negative integers; {}", t, damaged);
    TIDE_CHECK(begin <= end, "{}: 'data_offsets' [{}, {}] begin after they end; {}", t, begin, end,
               damaged);
    TIDE_CHECK(end - begin == nbytes,
               "{}: 'data_offsets' [{}, {}] hold {} bytes but a {} tensor of shape {} has {}; {}",
               t, begin, end, end - begin, dtype->get_ref<const std::string&>(), entry.shape.str(),
               nbytes, damaged);
    TIDE_CHECK(end <= data_size,
               "{} is truncated: tensor '{}' ends at data byte {}, past the end of the data ({} "
               "bytes)",
               who, shown(name), end, data_size);
    entry.offset = data_start + begin;
    entry.nbytes = nbytes;
    entries_.push_back(std::move(entry));
  }

  // 5. The tensors tile the data region exactly: in offset order, each starts where the one
  // before ends (as Hugging Face's reader checks; the order of the JSON keys does not matter).
  std::stable_sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  uint64_t at = data_start;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries_) {
    TIDE_CHECK(e.offset >= at, "{}: tensors '{}' and '{}' overlap in the data; {}", who,
               shown(prev ? prev->name : ""), shown(e.name), damaged);
    TIDE_CHECK(e.offset == at, "{}: there is a gap of {} bytes before tensor '{}' in the data; {}",
               who, e.offset - at, shown(e.name), damaged);
    at = e.offset + e.nbytes;
    prev = &e;
  }
  TIDE_CHECK(at == size, "{} has {} trailing bytes after its last tensor; {}", who, size - at,
             damaged);

  if (foreign) {  // no checksum, and the metadata is the file's own
    metadata_ = meta != h.end() ? *meta : json::object();
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
    return;
  }

  // 6. The checksum over header (digits read as '0's) and data.
  TIDE_CHECK(text.starts_with(kChecksumPrefix) &&
                 std::string_view(text).substr(kChecksumPrefix.size(), kChecksumDigits) == stored,
             "{}: its header does not begin with tide's checksum field ({}); {}", who,
             kChecksumPrefix, damaged);
  std::memset(text.data() + kChecksumPrefix.size(), '0', kChecksumDigits);
  if (verify_checksum) verify_data_checksum(text, data_start, data_size, stored);

  // 7. The caller's metadata.
  try {
    metadata_ = json::parse(tide_text);
  } catch (const json::exception&) {
    TIDE_FAIL("{}: its __metadata__ 'tide' is not valid JSON; {}", who, damaged);
  }
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
  checksum_ = stored;
}

// The checksum over header (digits read as '0's) and data, streamed through the file.
void SafetensorsReader::verify_data_checksum(const std::string& zeroed_header, uint64_t data_start,
                                             uint64_t data_size, const std::string& stored) const {
  const std::string who = subject();
  XxhState hash;
  hash.update(zeroed_header.data(), zeroed_header.size());
  std::vector<char> buf(std::min<uint64_t>(data_size, 4u << 20));
  for (uint64_t done = 0; done < data_size;) {
    const uint64_t chunk = std::min<uint64_t>(buf.size(), data_size - done);
    TIDE_CHECK(pread_all(fd_, buf.data(), chunk, data_start + done),
               "{} was cut short while being read; check nothing else is writing it", who);
    hash.update(buf.data(), chunk);
    done += chunk;
  }
  const std::string computed = hash.hex();
  TIDE_CHECK(computed == stored,
             "{} is corrupt: checksum mismatch (stored {}, computed {}); it was damaged after it "
             "was written, use another copy",
             who, stored, computed);
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const SafetensorsEntry& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  TIDE_CHECK(e != nullptr, "{} has no tensor '{}'", subject(), shown(name));
  return *e;
}

void SafetensorsReader::read(const std::string& name, void* dst, DType expected_dtype,
                             const Shape& expected_shape) const {
  const SafetensorsEntry& e = entry(name);
  TIDE_CHECK(e.dtype == expected_dtype, "{}: tensor '{}' is {} but {} was expected", subject(),
             shown(name), safetensors_dtype_name(e.dtype), safetensors_dtype_name(expected_dtype));
  TIDE_CHECK(e.shape == expected_shape, "{}: tensor '{}' has shape {} but {} was expected",
             subject(), shown(name), e.shape.str(), expected_shape.str());
  TIDE_CHECK(pread_all(fd_, dst, e.nbytes, e.offset),
             "{} was cut short while reading tensor '{}'; check nothing else is writing it",
             subject(), shown(name));
}

void SafetensorsReader::read_bytes(const std::string& name, uint64_t begin, uint64_t nbytes,
                                   void* dst) const {
  const SafetensorsEntry& e = entry(name);
  TIDE_CHECK(begin <= e.nbytes && nbytes <= e.nbytes - begin,
             "{}: bytes [{}, {}) are outside tensor '{}' ({} bytes)", subject(), begin,
             begin + nbytes, shown(name), e.nbytes);
  TIDE_CHECK(pread_all(fd_, dst, nbytes, e.offset + begin),
             "{} was cut short while reading tensor '{}'; check nothing else is writing it",
             subject(), shown(name));
}

std::vector<float> SafetensorsReader::read_as_f32(const SafetensorsEntry& e) const {
  const auto n = static_cast<size_t>(e.shape.numel());
  std::vector<float> out(n);
  if (e.dtype == DType::F32) {
    read(e.name, out.data(), e.dtype, e.shape);
    return out;
  }
  TIDE_CHECK(e.dtype == DType::BF16 || e.dtype == DType::F16,
             "{}: tensor '{}' is {}; it can be read as f32 from F32, BF16 or F16", subject(),
             e.name, dtype_name(e.dtype));
  std::vector<uint16_t> half(n);
  read(e.name, half.data(), e.dtype, e.shape);
  convert_elements(half.data(), e.dtype, out.data(), DType::F32, static_cast<int64_t>(n));
  return out;
}

}  // namespace tide
