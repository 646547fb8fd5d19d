// Fuzzes the token shard reader: the input is a shard file. An accepted shard must hold
// exactly the tokens its header counts, all readable.
#include "fuzz_util.h"
#include "tide/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  static const std::string path = fuzz::scratch_path("shard");
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::accepts([&] {
    TokenShard shard(path);
    if (kShardHeaderBytes + shard.size() * sizeof(uint16_t) != size) std::abort();
    uint64_t sum = 0;
    for (uint16_t t : shard.tokens()) sum += t;
    if (shard.size() > 0 && sum < shard.max_token()) std::abort();
    TokenShard moved(std::move(shard));
    moved.check_vocab(static_cast<int>(size % 70000));
  });
  return 0;
}
