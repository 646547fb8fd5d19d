// Fuzzes `tide prepare --format nanogpt` (import_nanogpt): the input is nanoGPT's data folder,
// flags (1 byte: bit 0 val.bin present; bits 1-2 --vocab-size: 0 (the largest id + 1), 65536,
// 300 or 70000), train.bin's length (u32 little-endian), train.bin, then val.bin. An accepted
// import must hold exactly the input's ids: the shards it wrote are read back and compared.
#include <array>
#include <cstring>
#include <filesystem>

#include "fuzz_util.h"
#include "tide/data/nanogpt_import.h"
#include "tide/data/shard.h"

namespace {

namespace fs = std::filesystem;
using namespace tide;

// The shard at `path` must hold exactly the uint16 ids of `bytes` (in either width: a
// vocabulary over 65536 writes uint32 ids).
void check_shard(const std::string& path, std::string_view bytes) {
  const TokenShard shard(path);
  if (shard.size() * 2 != bytes.size()) std::abort();
  for (size_t i = 0; i < shard.size(); ++i) {
    uint16_t id;
    std::memcpy(&id, bytes.data() + 2 * i, 2);
    if (shard[i] != id) std::abort();  // accepted, but wrote other ids than the input's
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = fuzz::scratch_path("nanogpt_bin");
  static const std::string in = root + "/in", out = root + "/out";
  static const bool made = fs::create_directories(in) || fs::is_directory(in);
  if (!made) std::abort();
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  if (all.size() < 5) return 0;
  const unsigned flags = static_cast<unsigned char>(all[0]);
  const auto [train, val] = fuzz::split_prefixed(all.substr(1));
  fuzz::write_file(in + "/train.bin", train);
  std::error_code ec;
  if (flags & 1)
    fuzz::write_file(in + "/val.bin", val);
  else
    fs::remove(in + "/val.bin", ec);
  fs::remove_all(out, ec);

  PrepareOptions o;
  o.format = "nanogpt";
  o.inputs = {in};
  o.out_dir = out;
  o.vocab_size = std::array{0, 65536, 300, 70000}[(flags >> 1) & 3];
  o.log = [](const std::string&) {};
  PrepareResult r;
  if (!fuzz::accepts([&] { r = import_nanogpt(o); })) return 0;
  check_shard(r.train_path, train);
  if (flags & 1) check_shard(r.val_path, val);
  const PrepareResult back = read_prepared_corpus(out);  // must read what import wrote
  if (back.vocab_size != r.vocab_size || back.train_tokens != r.train_tokens ||
      back.val_tokens != r.val_tokens || r.train_tokens * 2 != static_cast<int64_t>(train.size()))
    std::abort();
  if (TokenShard(r.train_path).max_token() >= r.vocab_size ||
      ((flags & 1) && TokenShard(r.val_path).max_token() >= r.vocab_size))
    std::abort();  // an id the vocabulary does not have
  return 0;
}
