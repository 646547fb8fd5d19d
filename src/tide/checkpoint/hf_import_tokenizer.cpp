// `tide import`'s tokenizer (hf_import_tokenizer.h).
#include "tide/checkpoint/hf_import_tokenizer.h"

#include <filesystem>
#include <fstream>

#include "tide/core/read_file.h"
#include "tide/data/tokenizer.h"

namespace tide {

namespace fs = std::filesystem;

HfImportTokenizer choose_import_tokenizer(const std::string& hf_dir, const std::string& out,
                                          const HfImportOptions& options, int vocab_size,
                                          HfImportResult& result) {
  std::error_code ec;
  HfImportTokenizer t;
  t.out = (fs::path(out).parent_path() / "tokenizer.json").string();
  // The tokenizer: given, or the folder's own tokenizer.json (what `tide export` writes, and
  // what HF's folders hold) when tide reads it and it fits the model; otherwise none, and the
  // result says why.
  t.in = options.tokenizer;
  if (t.in.empty()) {
    const std::string own = (fs::path(hf_dir) / "tokenizer.json").string();
    if (fs::is_regular_file(own, ec)) {
      try {
        const int n = Tokenizer::load(own).vocab_size();
        if (n <= vocab_size)
          t.in = own;
        else
          result.tokenizer_skipped = fmt::format(
              "{} has {} tokens, more than the model's vocab_size {}", own, n, vocab_size);
      } catch (const Error& e) {
        result.tokenizer_skipped = e.what();
      }
    }
  }
  if (t.in.empty()) return t;
  TIDE_CHECK(fs::is_regular_file(t.in, ec),
             "cannot read tokenizer '{}': no such file; pass a tokenizer.json written by `tide "
             "prepare`",
             t.in);
  t.text = read_file(t.in, "tokenizer file");
  const int tok_vocab = Tokenizer::load(t.in).vocab_size();
  TIDE_CHECK(tok_vocab <= vocab_size,
             "tokenizer '{}' has {} tokens but the model's vocab_size is {}; pass the tokenizer "
             "the model was trained with",
             t.in, tok_vocab, vocab_size);
  const bool same = fs::exists(t.out, ec) && fs::equivalent(t.in, t.out, ec);
  TIDE_CHECK(same || options.overwrite || !fs::exists(t.out, ec) ||
                 read_file(t.out, "tokenizer file") == t.text,
             "'{}' exists and differs from '{}'; pass --overwrite to replace it", t.out, t.in);
  return t;
}

void write_import_tokenizer(const HfImportTokenizer& t, CheckpointInfo& info,
                            HfImportResult& result) {
  if (t.in.empty()) return;
  std::error_code ec;
  info.tokenizer = "tokenizer.json";
  const bool same = fs::exists(t.out, ec) && fs::equivalent(t.in, t.out, ec);
  if (!same) {
    const fs::path dir = fs::path(t.out).parent_path();
    if (!dir.empty()) fs::create_directories(dir, ec);
    const std::string tmp = t.out + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << t.text;
      TIDE_CHECK(f.good(), "cannot write '{}'; check the directory is writable", tmp);
    }
    fs::rename(tmp, t.out, ec);
    TIDE_CHECK(!ec, "cannot write '{}': {}", t.out, ec.message());
  }
  result.tokenizer = t.out;
}

}  // namespace tide
