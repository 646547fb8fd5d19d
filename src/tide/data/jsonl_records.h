#pragma once
// Fine-tuning input for `tide prepare --format jsonl`: one JSON object per line, either
//   {"text": "..."}                           a document whose every token is trained on, or
//   {"prompt": "...", "completion": "..."}    a pair whose prompt tokens are left out of the loss
// (other fields are ignored; blank lines are skipped). The shards carry which tokens the loss
// counts (shard.h's loss mask), so instruction data trains only on the answers.

#include <string>
#include <vector>

namespace tide {

struct Record {
  std::string prompt;  // tokens not trained on ("" for a text record)
  std::string text;    // tokens trained on: the text, or the completion
  bool has_prompt = false;
};

// The records of one JSONL file's contents; `source` names the file in errors, which give the
// line number and what a line must hold.
std::vector<Record> parse_jsonl_records(const std::string& contents, const std::string& source);

}  // namespace tide
