#include "tide/checkpoint/auto_resume.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/error.h"

namespace tide {

namespace fs = std::filesystem;

namespace {

bool is_checkpoint_name(const std::string& name) {
  static const std::regex pattern(R"(model(_step[0-9]+)?\.ckpt)");
  return std::regex_match(name, pattern);
}

// The step recorded in checkpoint `path`, from its header or index alone (no data read).
int64_t recorded_step(const std::string& path) {
  if (is_sharded_checkpoint(path))
    return read_sharded_checkpoint_info(path, /*verify_data=*/false).info.step;
  const SafetensorsReader r(path, "checkpoint", /*verify_checksum=*/false);
  return checkpoint_info_from_meta(r.metadata(), fmt::format("checkpoint '{}'", path)).step;
}

// Reads the whole checkpoint as a load would (every checksum); throws what a load would.
void verify(const std::string& path) {
  if (is_sharded_checkpoint(path))
    read_sharded_checkpoint_info(path, /*verify_data=*/true);
  else
    SafetensorsReader(path, "checkpoint", /*verify_checksum=*/true);
}

}  // namespace

AutoResume find_auto_resume(const std::string& out_dir) {
  AutoResume out;
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return out;
  struct Candidate {
    std::string path;
    int64_t step;
  };
  std::vector<Candidate> found;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string path = e.path().string();
    if (!is_checkpoint_name(e.path().filename().string())) continue;
    // A directory without index.json is not a checkpoint (a save's leftovers).
    if (fs::is_directory(path, ec) && !is_sharded_checkpoint(path)) continue;
    try {
      found.push_back({path, recorded_step(path)});
    } catch (const Error& err) {
      out.skipped.push_back(fmt::format("{}: {}", path, err.what()));
    }
  }
  // Newest first (equal steps hold the same state: by name).
  std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  for (const Candidate& c : found) {
    try {
      verify(c.path);
    } catch (const Error& err) {
      out.skipped.push_back(fmt::format("{}: {}", c.path, err.what()));
      continue;
    }
    out.path = c.path;
    out.step = c.step;
    break;
  }
  return out;
}

}  // namespace tide
