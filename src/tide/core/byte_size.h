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

// Bytes in GiB, two decimals, no unit.
std::string format_gib(int64_t bytes);

// The unit of a table of byte figures, chosen for its largest figure so that the figures read
// as numbers of a sensible size: GiB (2 decimals) from 1 GiB up, MiB (1 decimal) from 1 MiB,
// else KiB (1 decimal). One unit per table: columns compare at a glance.
struct TableUnit {
  const char* name = "GiB";
  double bytes = 1024.0 * 1024 * 1024;
  int decimals = 2;
};
TableUnit table_unit(int64_t largest);
// A figure in the table's unit, without the unit; "-" for 0 bytes (nothing there, rather than
// a 0.00 that reads like a rounded figure), "<0.01" (or "<0.1") for a figure that would print
// as zero.
std::string format_in(int64_t bytes, const TableUnit& unit);

}  // namespace tide
