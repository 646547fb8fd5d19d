#pragma once
// Memory sizes as people write them: "80GiB", "512 GB", "1.5TiB". A unit is required, so that
// "80" (bytes? GB? GiB?) is never silently misread.
//   binary:  KiB MiB GiB TiB (powers of 1024)     decimal: KB MB GB TB (powers of 1000)   B
// Units are case-insensitive; a space between number and unit is allowed.

#include <cstdint>
#include <string>

namespace tide {

// Throws a tide::Error with the accepted forms when `text` is not a size.
int64_t parse_byte_size(const std::string& text);

// "12.34 GiB" (B, KiB, MiB, GiB or TiB, whichever keeps the number below 1024).
std::string format_bytes(int64_t bytes);

// Bytes in GiB, two decimals, no unit: the number the estimate table prints.
std::string format_gib(int64_t bytes);

}  // namespace tide
