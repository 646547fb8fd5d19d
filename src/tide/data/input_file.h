#pragma once
// Input files of `tide prepare`: plain text, or gzip-compressed text (name ending in .gz, read
// with zlib), so that a compressed corpus need not be unpacked first. Whether a file is text is
// judged on its (decompressed) first 8 KiB: a NUL byte there means binary (an index, an image).

#include <string>

namespace tide {

// The whole (decompressed) contents of `path`; a tide::Error naming the file when it cannot be
// read or is not valid gzip.
std::string read_input_file(const std::string& path);

// True when the first 8 KiB of the (decompressed) contents hold a NUL byte, or a .gz file does
// not decompress.
bool input_looks_binary(const std::string& path);

// Whether `path` is read through zlib (its name ends in .gz).
bool is_gzip_name(const std::string& path);

}  // namespace tide
