// Fuzzes the token shard reader: the input is a shard file (uint16 or uint32 tokens, with or
// without a loss mask). An accepted shard must hold exactly the tokens its header counts (and
// their mask), all readable.
#include "fuzz_util.h"
#include "tide/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  static const std::string path = fuzz::scratch_path("shard");
  fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::accepts([&] {
    TokenShard shard(path);
    // Header, tokens (uint16 or uint32) and the loss mask's byte per token when it has one.
    const size_t mask = shard.has_loss_mask() ? shard.size() : 0;
    if (kShardHeaderBytes + shard.size() * shard.token_bytes() + mask != size) std::abort();
    uint64_t sum = 0;
    for (size_t i = 0; i < shard.size(); ++i) sum += shard[i];
    if (shard.size() > 0 && sum < shard.max_token()) std::abort();
    TokenShard moved(std::move(shard));
    moved.check_vocab(static_cast<int>(size % 70000));
  });
  return 0;
}
