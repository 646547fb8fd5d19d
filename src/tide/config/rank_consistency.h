#pragma once
// Rank consistency: every rank of a data-parallel job must run the same training. Why: a rank
// started with another seed, lr, n_head or dropout trains silently and the ranks diverge; one
// with another n_embd, n_layer or train_steps dies later in a raw MPI_ERR_TRUNCATE. So at
// start-up, before any other collective, every rank hashes its resolved config, one 64-bit hash
// per schema key (the schema is compiled in, so every rank has the same count), and the hashes
// are all-gathered and compared. Once the data is open a second round compares the data (shard
// sizes and a hash of samples of their tokens) and the model's chunk layout. A mismatch ends
// every rank with exit code 1 and one line naming the keys and ranks that differ:
//
//   tide: error: ranks disagree on config: optimizer.params.lr (rank 1 differs from rank 0), ...
//
// Keys that may differ per rank (kPerRankKeys): `threads` (results do not depend on the thread
// count), `log.progress` (only rank 0 prints), `comm.timeout_s` (each rank's own patience), and
// the data paths `data.dir`, `data.train`, `data.val` (a node may keep its copy elsewhere; their
// contents are compared instead).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/config/config.h"
#include "tide/memory/chunk_layout.h"

namespace tide {

// Schema keys whose value may differ between ranks.
extern const std::vector<std::string> kPerRankKeys;

// Every schema key (config_schema(), in order) with its resolved value in `c`.
nlohmann::json config_key_values(const TrainConfig& c);

// One compared item: a name for the message and the hash of its value on this rank.
struct AgreementItem {
  std::string name;
  uint64_t hash = 0;
};

// One item per schema key (keys in kPerRankKeys hash to 0, so they always agree).
std::vector<AgreementItem> config_agreement_items(const TrainConfig& c);
// Shard sizes and hashes of three 4 KiB samples of each shard (start, middle, end).
uint64_t data_fingerprint(const std::vector<std::string>& files);
// Tensor names, shapes, chunk sizes and group size of a chunk layout.
uint64_t layout_fingerprint(const ChunkLayout& layout);

// "ranks disagree on config: a (rank 1 differs from rank 0), b (ranks 1, 3 differ from rank 0)"
// from every rank's hashes (hashes[r][i]: rank r, item i); "" when all agree.
std::string disagreement_message(const std::vector<AgreementItem>& items,
                                 const std::vector<std::vector<uint64_t>>& hashes);

// Collective over `world` (a fixed-size all-gather): throws an AgreedError with the message on
// every rank when the ranks' items differ. Every rank must pass the same number of items.
void check_ranks_agree(ProcessGroup& world, const std::vector<AgreementItem>& items);

}  // namespace tide
