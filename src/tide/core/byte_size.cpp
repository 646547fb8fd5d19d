#include "tide/core/byte_size.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "tide/core/error.h"

namespace tide {

int64_t parse_byte_size(const std::string& text) {
  auto bad = [&]() {
    TIDE_FAIL(
        "'{}' is not a memory size; write a number and a unit, e.g. 80GiB or 512GB "
        "(units: B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers of 1024)",
        text);
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  // strtod alone would also take "inf", "nan" and hex; insist on digits.
  if (end == begin || !std::isdigit(static_cast<unsigned char>(text.front()))) bad();
  std::string unit;
  for (const char* c = end; *c; ++c)
    if (*c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  double scale = 0;
  if (unit == "b")
    scale = 1;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else if (unit == "kib")
    scale = 1024.0;
  else if (unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    bad();
  const double bytes = number * scale;
  TIDE_CHECK(std::isfinite(bytes) && bytes < 9.0e18, "memory size '{}' is too large", text);
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(x) >= 1024 && u < 4) {
    x /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", x, units[u]);
}

std::string format_gib(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

TableUnit table_unit(int64_t largest) {
  if (largest >= (int64_t{1} << 30)) return {"GiB", 1024.0 * 1024 * 1024, 2};
  if (largest >= (int64_t{1} << 20)) return {"MiB", 1024.0 * 1024, 1};
  return {"KiB", 1024.0, 1};
}

std::string format_in(int64_t bytes, const TableUnit& unit) {
  if (bytes == 0) return "-";
  const double x = static_cast<double>(bytes) / unit.bytes;
  const double least = unit.decimals == 2 ? 0.005 : 0.05;  // what rounds to zero
  if (x < least) return unit.decimals == 2 ? "<0.01" : "<0.1";
  return fmt::format("{:.{}f}", x, unit.decimals);
}

}  // namespace tide
