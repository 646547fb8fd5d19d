#pragma once
// Shared by the libFuzzer targets: inputs go to a scratch file (the parsers read files), and
// only tide::Error may escape a parser. Anything else (another exception, a sanitizer report,
// a leak, a crash, a timeout) is a bug that libFuzzer reports.

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "tide/core/error.h"
#include "tide/model/config.h"

namespace tide::fuzz {

// A scratch file of this process (libFuzzer's -jobs/-fork run one process per job).
inline std::string scratch_path(const char* target) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/tide_fuzz_" + target + "_" +
         std::to_string(::getpid());
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();  // the harness itself is broken
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  if (std::fclose(f) != 0) std::abort();
}

// Runs `f`; a tide::Error is the expected way to refuse an input. Returns true when f returned.
// TIDE_FUZZ_VERBOSE=1 prints each refusal (to see why a seed or a corpus input is refused:
// fuzz_<target> -runs=0 <files>).
template <class F>
bool accepts(F&& f) {
  static const bool verbose = std::getenv("TIDE_FUZZ_VERBOSE") != nullptr;
  try {
    f();
    if (verbose) std::fprintf(stderr, "accepted\n");
    return true;
  } catch (const tide::Error& e) {
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    return false;
  }
}

// Two files in one input: a u32 little-endian length, that many bytes (fewer if the input
// ends first), then the rest; join_prefixed makes such an input (for the seeds).
inline std::pair<std::string_view, std::string_view> split_prefixed(std::string_view in) {
  if (in.size() < 4) return {in.substr(0, 0), in.substr(0, 0)};
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(in[i]);
  in.remove_prefix(4);
  const size_t first = std::min<size_t>(n, in.size());
  return {in.substr(0, first), in.substr(first)};
}

inline std::string join_prefixed(std::string_view first, std::string_view rest) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((first.size() >> (8 * i)) & 0xff);
  return out.append(first).append(rest);
}

// The model of the checkpoint target and its seeds (make_seeds): small enough that a whole
// checkpoint fits libFuzzer's input limit.
inline GPTConfig tiny_model() {
  GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 4;
  c.vocab_size = 8;
  c.max_seq_len = 4;
  return c;
}

// Rewrites the checksum of a safetensors file in tide's layout (u64 header length, header
// starting with {"__metadata__":{"checksum":"<16 hex>"), so that mutated files get past the
// checksum and reach the checks behind it. Leaves other inputs as they are.
inline void fix_checksum(std::string& bytes) {
  constexpr std::string_view kPrefix = R"({"__metadata__":{"checksum":")";
  if (bytes.size() < 8) return;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > bytes.size() - 8 || n < kPrefix.size() + 16) return;
  if (std::string_view(bytes).substr(8, kPrefix.size()) != kPrefix) return;
  const size_t digits = 8 + kPrefix.size();
  bytes.replace(digits, 16, "0000000000000000");
  XXH3_state_t* s = XXH3_createState();
  XXH3_64bits_reset(s);
  XXH3_64bits_update(s, bytes.data() + 8, bytes.size() - 8);
  const uint64_t h = XXH3_64bits_digest(s);
  XXH3_freeState(s);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  bytes.replace(digits, 16, hex);
}

}  // namespace tide::fuzz
