#pragma once
// checkpoint.resume=auto: continue from the newest complete checkpoint in out_dir, or start
// fresh when there is none, so that a relaunch loop (Slurm --requeue, a supervisor restarting
// a killed job) passes the same command every time.
//
// "Complete" is what a load would accept: a committed sharded directory (index.json, every
// shard's checksum) or a single file whose checksum verifies. Saves never leave a torn
// checkpoint under its final name (files are renamed into place, directories swapped in from
// "<name>.partial"), so what can be found torn is an older tide's or a damaged disk's: such a
// checkpoint is skipped, with the reason, for the next newest. "<name>.partial" and "<name>.old"
// are never candidates.

#include <string>
#include <vector>

namespace tide {

struct AutoResume {
  std::string path;  // empty: no complete checkpoint, start fresh
  int64_t step = 0;
  std::vector<std::string> skipped;  // "<path>: <why>" for each newer one that failed to verify
};

// Looks in `out_dir` at model.ckpt and model_step<N>.ckpt (files or sharded directories),
// newest step first (the step recorded in each, not its name), and returns the first that
// verifies. Reads every candidate's header and the chosen one's data.
AutoResume find_auto_resume(const std::string& out_dir);

}  // namespace tide
