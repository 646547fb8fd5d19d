#include "tide/data/input_file.h"

#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tide/core/error.h"

namespace tide {

namespace {

// Reads at most `limit` decompressed bytes of a gzip file (all of it when limit is 0). gzread
// also reads a file that is not compressed at all as it is, like `zcat -f`.
std::string read_gzip(const std::string& path, size_t limit, bool* ok) {
  *ok = true;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    *ok = false;
    return {};
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const unsigned want = limit ? static_cast<unsigned>(std::min(sizeof buf, limit - out.size()))
                                : static_cast<unsigned>(sizeof buf);
    if (want == 0) break;
    const int n = gzread(f, buf, want);
    if (n < 0) {
      *ok = false;
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  // A truncated file ends in a short read with Z_BUF_ERROR ("unexpected end of file").
  int err = Z_OK;
  gzerror(f, &err);
  if (err != Z_OK && !(limit && out.size() == limit)) *ok = false;
  gzclose(f);
  return out;
}

}  // namespace

bool is_gzip_name(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

std::string read_input_file(const std::string& path) {
  if (is_gzip_name(path)) {
    bool ok = false;
    std::string text = read_gzip(path, 0, &ok);
    TIDE_CHECK(ok, "{}: cannot read it as gzip (truncated or corrupt?); check the file", path);
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  TIDE_CHECK(in.good(), "{}: cannot open input file; check the path and its permissions", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool input_looks_binary(const std::string& path) {
  std::string head;
  if (is_gzip_name(path)) {
    bool ok = false;
    head = read_gzip(path, 8192, &ok);
    if (!ok) return true;
  } else {
    std::ifstream in(path, std::ios::binary);
    head.resize(8192);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
  }
  return head.find('\0') != std::string::npos;
}

}  // namespace tide
