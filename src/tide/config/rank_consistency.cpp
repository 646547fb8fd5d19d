#include "tide/config/rank_consistency.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tide/comm/distributed.h"

namespace tide {

using json = nlohmann::json;

const std::vector<std::string> kPerRankKeys = {"threads",  "log.progress", "comm.timeout_s",
                                               "data.dir", "data.train",   "data.val"};

json config_key_values(const TrainConfig& c) {
  // The config's one-schema values (config.h): resolved, so two spellings of the same run
  // agree. A unit test checks that this covers exactly the schema's keys.
  return c.values;
}

std::vector<AgreementItem> config_agreement_items(const TrainConfig& c) {
  const json values = config_key_values(c);
  std::vector<AgreementItem> items;
  for (const ConfigKey& k : config_schema()) {
    const bool per_rank =
        std::find(kPerRankKeys.begin(), kPerRankKeys.end(), k.path) != kPerRankKeys.end();
    // A key missing from config_key_values hashes as "?" (the unit test catches that).
    const std::string text = values.contains(k.path) ? values[k.path].dump() : "?";
    items.push_back({k.path, per_rank ? 0 : XXH3_64bits(text.data(), text.size())});
  }
  return items;
}

uint64_t data_fingerprint(const std::vector<std::string>& files) {
  XXH3_state_t* s = XXH3_createState();
  TIDE_CHECK(s != nullptr, "out of memory (XXH3 state)");
  XXH3_64bits_reset(s);
  const uint64_t n = files.size();
  XXH3_64bits_update(s, &n, sizeof n);
  std::vector<char> buf(4096);
  for (const std::string& f : files) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(f, ec);
    const uint64_t known = ec ? UINT64_MAX : size;
    XXH3_64bits_update(s, &known, sizeof known);
    std::ifstream in(f, std::ios::binary);
    for (uint64_t at : {uint64_t{0}, size / 2, size > buf.size() ? size - buf.size() : 0}) {
      if (ec || !in) break;
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      XXH3_64bits_update(s, buf.data(), static_cast<size_t>(in.gcount()));
      in.clear();
    }
  }
  const uint64_t h = XXH3_64bits_digest(s);
  XXH3_freeState(s);
  return h;
}

uint64_t layout_fingerprint(const ChunkLayout& layout) {
  std::string text = fmt::format("chunks {} |", layout.num_chunks());
  for (int c = 0; c < layout.num_chunks(); ++c) text += fmt::format(" {}", layout.chunk_elems(c));
  for (const TensorSlot& t : layout.slots()) text += fmt::format(" | {} {}", t.name, t.shape.str());
  return XXH3_64bits(text.data(), text.size());
}

std::string disagreement_message(const std::vector<AgreementItem>& items,
                                 const std::vector<std::vector<uint64_t>>& hashes) {
  std::string list;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<int> differ;
    for (size_t r = 1; r < hashes.size(); ++r)
      if (hashes[r][i] != hashes[0][i]) differ.push_back(static_cast<int>(r));
    if (differ.empty()) continue;
    const std::string ranks = short_rank_list(differ);
    list += fmt::format("{}{} ({} {} from rank 0)", list.empty() ? "" : ", ", items[i].name,
                        differ.size() > 1 ? "ranks " + ranks : "rank " + ranks,
                        differ.size() > 1 ? "differ" : "differs");
  }
  return list.empty() ? "" : "ranks disagree on config: " + list;
}

void check_ranks_agree(ProcessGroup& world, const std::vector<AgreementItem>& items) {
  const int n = world.size();
  if (n == 1) return;
  const int64_t k = static_cast<int64_t>(items.size());
  std::vector<uint64_t> mine(items.size()), all(items.size() * static_cast<size_t>(n));
  for (size_t i = 0; i < items.size(); ++i) mine[i] = items[i].hash;
  // 64-bit hashes moved bit for bit as pairs of 32-bit words.
  world.all_gather(Tensor(mine.data(), Shape{2 * k}, DType::I32),
                   Tensor(all.data(), Shape{2 * k * n}, DType::I32));
  std::vector<std::vector<uint64_t>> hashes(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    hashes[static_cast<size_t>(r)].assign(all.begin() + r * k, all.begin() + (r + 1) * k);
  const std::string message = disagreement_message(items, hashes);
  if (!message.empty()) throw AgreedError(message, world.rank() == 0);
}

}  // namespace tide
