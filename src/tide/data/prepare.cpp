#include "tide/data/prepare.h"

#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tide/core/error.h"
#include "tide/core/json_error.h"
#include "tide/data/input_file.h"
#include "tide/data/jsonl_records.h"
#include "tide/data/nanogpt_import.h"
#include "tide/data/shard.h"
#include "tide/data/tokenizer.h"

namespace fs = std::filesystem;

namespace tide {

namespace {

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs,
                                       const std::function<void(const std::string&)>& log) {
  std::vector<std::string> files, skipped;
  for (const std::string& input : inputs) {
    if (input.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      const int rc = ::glob(input.c_str(), 0, nullptr, &g);
      std::vector<std::string> matched(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
      globfree(&g);
      TIDE_CHECK(!matched.empty(), "--input {}: no files match this pattern; check the pattern",
                 input);
      std::sort(matched.begin(), matched.end());
      for (const std::string& m : matched) {
        if (fs::is_regular_file(m)) files.push_back(m);
      }
    } else if (fs::is_directory(input)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::recursive_directory_iterator(input)) {
        const std::string name = entry.path().filename().string();
        if (!entry.is_regular_file() || name.starts_with(".")) continue;
        if (input_looks_binary(entry.path().string())) {
          skipped.push_back(entry.path().string());
          continue;
        }
        found.push_back(entry.path().string());
      }
      TIDE_CHECK(!found.empty(),
                 "--input {}: the directory holds no text files; point at text files", input);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      TIDE_CHECK(fs::is_regular_file(input),
                 "--input {}: no such file or directory; pass text files, a directory or a glob",
                 input);
      files.push_back(input);
    }
  }
  if (!skipped.empty()) {  // one line, however many (a corpus may hold thousands of indexes)
    std::sort(skipped.begin(), skipped.end());
    std::string some;
    for (size_t i = 0; i < skipped.size() && i < 3; ++i) some += (i ? ", " : "") + skipped[i];
    log(fmt::format("prepare: skipped {} binary file{} (a NUL byte in the first 8 KiB): {}{}",
                    skipped.size(), skipped.size() == 1 ? "" : "s", some,
                    skipped.size() > 3 ? ", ..." : ""));
  }
  TIDE_CHECK(!files.empty(), "no input files; pass --input with text files, a directory or a glob");
  return files;
}

// Moves the last `fraction` of a document (from the first line break after the cut point) to
// val. Used when there are too few documents to deal whole ones into val.
std::pair<std::string, std::string> split_tail(const std::string& doc, double fraction) {
  size_t cut = static_cast<size_t>(std::floor(doc.size() * (1.0 - fraction)));
  const size_t newline = doc.find('\n', cut);
  if (newline != std::string::npos && newline + 1 < doc.size()) cut = newline + 1;
  return {doc.substr(0, cut), doc.substr(cut)};
}

// The encoded documents, and the loss mask when any has a prompt (else empty).
struct Encoded {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;
};

Encoded encode_documents(const Tokenizer& tok, const std::vector<Record>& docs,
                         SpecialTokens special) {
  // Documents are encoded in parallel, each into its own vector, and joined in order: the
  // output does not depend on the thread count.
  // <|endoftext|> before every document, as llm.c does; a tokenizer.json with a template (Llama
  // 3's BOS) puts its tokens around the document instead, and end-of-text after it. A
  // prompt/completion pair always ends with end-of-text (the model learns to stop), and only its
  // completion and end are in the loss.
  const std::vector<int32_t> prefix = tok.document_prefix(), suffix = tok.document_suffix();
  std::vector<int32_t> pair_suffix = suffix;
  if (std::find(suffix.begin(), suffix.end(), tok.eot_id()) == suffix.end())
    pair_suffix.push_back(tok.eot_id());
  const bool masked =
      std::any_of(docs.begin(), docs.end(), [](const Record& r) { return r.has_prompt; });
  std::vector<std::vector<int32_t>> parts(docs.size());
  std::vector<size_t> loss_from(docs.size(), 0);  // the first token of parts[d] in the loss
#pragma omp parallel for schedule(dynamic, 16)
  for (size_t d = 0; d < docs.size(); ++d) {
    parts[d] = prefix;
    if (docs[d].has_prompt) {
      tok.encode_append(docs[d].prompt, parts[d], special);
      loss_from[d] = parts[d].size();
    }
    tok.encode_append(docs[d].text, parts[d], special);
    const std::vector<int32_t>& end = docs[d].has_prompt ? pair_suffix : suffix;
    parts[d].insert(parts[d].end(), end.begin(), end.end());
  }
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  Encoded e;
  e.tokens.reserve(total);
  if (masked) e.loss_mask.reserve(total);
  for (size_t d = 0; d < docs.size(); ++d) {
    e.tokens.insert(e.tokens.end(), parts[d].begin(), parts[d].end());
    if (!masked) continue;
    e.loss_mask.insert(e.loss_mask.end(), loss_from[d], 0);
    e.loss_mask.insert(e.loss_mask.end(), parts[d].size() - loss_from[d], 1);
  }
  return e;
}

}  // namespace

std::vector<std::string> split_documents(const std::string& text, const std::string& separator) {
  std::vector<std::string> docs;
  auto keep = [&](std::string doc) {
    if (doc.find_first_not_of(" \t\r\n\v\f") != std::string::npos) docs.push_back(std::move(doc));
  };
  if (separator.empty()) {
    keep(text);
    return docs;
  }
  std::string doc;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string bare =
        (!line.empty() && line.back() == '\r') ? line.substr(0, line.size() - 1) : line;
    if (bare == separator) {
      keep(std::move(doc));
      doc.clear();
    } else {
      doc += line;
      doc += '\n';
    }
  }
  keep(std::move(doc));
  return docs;
}

double unigram_entropy(const std::vector<int32_t>& tokens, int vocab_size) {
  if (tokens.empty()) return 0.0;
  std::vector<int64_t> counts(vocab_size, 0);
  for (int32_t t : tokens) ++counts[t];
  const double n = static_cast<double>(tokens.size());
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) h -= (c / n) * std::log(c / n);
  }
  return h;
}

std::vector<std::string> default_corpus_files(const std::string& dir) {
  TIDE_CHECK(fs::is_directory(dir),
             "the default corpus needs the Debian fortunes package ({} not found); install it with "
             "apt-get install fortunes, or pass your own text with --input",
             dir);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    // Fortune text files have no extension; *.dat are strfile indexes, *.u8 links to the text.
    if (entry.is_regular_file() && !entry.path().has_extension())
      files.push_back(entry.path().string());
  }
  TIDE_CHECK(!files.empty(),
             "{} holds no fortune files; install them with apt-get install fortunes, or pass your "
             "own text with --input",
             dir);
  std::sort(files.begin(), files.end());
  return files;
}

PrepareOptions default_corpus_options(const std::string& out_dir) {
  PrepareOptions o;
  o.inputs = default_corpus_files();
  o.out_dir = out_dir;
  o.vocab_size = 4096;
  o.val_fraction = 0.05;
  // Built, not assigned from a literal: GCC 12's -Wrestrict misreads the inlined
  // assign(const char*) of a one-character literal (a false positive, GCC bug 105329).
  o.doc_separator = std::string(1, '%');
  return o;
}

PrepareResult prepare_corpus(const PrepareOptions& options) {
  TIDE_CHECK(options.format == "text" || options.format == "jsonl" || options.format == "nanogpt",
             "--format {} is not a format; use text, jsonl or nanogpt", options.format);
  TIDE_CHECK(options.special_tokens == "text" || options.special_tokens == "match",
             "--special-tokens {}: use text (special tokens written in the input are text) or "
             "match (they become their ids, as HF's default)",
             options.special_tokens);
  const SpecialTokens special =
      options.special_tokens == "match" ? SpecialTokens::kMatch : SpecialTokens::kAsText;
  const bool jsonl = options.format == "jsonl";
  TIDE_CHECK(!jsonl || options.doc_separator.empty(),
             "--doc-separator {} with --format jsonl: each JSONL line is one document already; "
             "drop --doc-separator",
             options.doc_separator);
  if (options.format == "nanogpt") return import_nanogpt(options);
  const auto log = options.log ? options.log : [](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  const bool gpt2 = !options.gpt2_encoder.empty() || !options.gpt2_vocab.empty();
  TIDE_CHECK(
      !gpt2 || (!options.gpt2_encoder.empty() && !options.gpt2_vocab.empty()),
      "GPT-2's tokenizer needs both files: pass --gpt2-encoder encoder.json and --gpt2-vocab "
      "vocab.bpe");
  const bool from_file = !options.tokenizer_file.empty();
  TIDE_CHECK(!(gpt2 && from_file),
             "--tokenizer and --gpt2-encoder/--gpt2-vocab both give a tokenizer; pass one of them");
  TIDE_CHECK(options.val_fraction > 0 && options.val_fraction < 1,
             "--val-fraction {} must be between 0 and 1 (exclusive), e.g. 0.05",
             options.val_fraction);
  TIDE_CHECK(
      gpt2 || from_file || (options.vocab_size >= 257 && options.vocab_size <= 65536),
      "--vocab-size {} is out of range; it must be at least 257 (256 bytes + <|endoftext|>) "
      "and at most 65536 (the size tide's BPE training is for; a larger vocabulary comes from "
      "--tokenizer)",
      options.vocab_size);
  TIDE_CHECK(options.max_mb >= 0, "--max-mb {} must be >= 0 (0 reads everything)", options.max_mb);
  TIDE_CHECK(!options.out_dir.empty(), "no output directory; pass --out-dir, e.g. data/mytext");

  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto step_start = Clock::now();

  // 1. Read the text and split it into documents.
  const std::vector<std::string> files = expand_inputs(options.inputs, log);
  const int64_t max_bytes =
      options.max_mb > 0 ? static_cast<int64_t>(options.max_mb * 1024 * 1024) : INT64_MAX;
  std::vector<Record> docs;
  std::vector<std::string> sources;
  int64_t input_bytes = 0;
  for (const std::string& file : files) {
    if (input_bytes >= max_bytes) break;
    std::string text = read_input_file(file);
    if (static_cast<int64_t>(text.size()) > max_bytes - input_bytes) {
      text.resize(max_bytes - input_bytes);  // --max-mb: cut at the limit, then at a line end
      const size_t last_newline = text.rfind('\n');
      if (last_newline != std::string::npos) text.resize(last_newline + 1);
    }
    input_bytes += static_cast<int64_t>(text.size());
    sources.push_back(file);
    if (jsonl) {
      for (Record& r : parse_jsonl_records(text, file)) docs.push_back(std::move(r));
    } else {
      for (std::string& doc : split_documents(text, options.doc_separator))
        docs.push_back(Record{.prompt = {}, .text = std::move(doc)});
    }
  }
  TIDE_CHECK(!docs.empty(), "the input ({}{}) holds no text; pass non-empty text files",
             files.front(), files.size() > 1 ? ", ..." : "");
  log(fmt::format("prepare: read {} files, {:.2f} MB, {} documents in {:.2f} s", sources.size(),
                  input_bytes / 1048576.0, docs.size(), seconds_since(step_start)));

  // 2. Deal documents into train and val: document i goes to val when floor((i+1)f) > floor(i f),
  // which spreads val evenly over the input (not just the last file's topic).
  std::vector<Record> train_docs, val_docs;
  const double f = options.val_fraction;
  for (size_t i = 0; i < docs.size(); ++i) {
    const bool to_val = std::floor((i + 1) * f) > std::floor(i * f);
    (to_val ? val_docs : train_docs).push_back(std::move(docs[i]));
  }
  if ((val_docs.empty() || train_docs.empty()) && !jsonl) {
    // Too few documents to deal whole ones: split each at a line break instead.
    for (Record& d : val_docs) train_docs.push_back(std::move(d));
    val_docs.clear();
    for (Record& d : train_docs) {
      auto [head, tail] = split_tail(d.text, f);
      d.text = std::move(head);
      if (!tail.empty()) val_docs.push_back(Record{.prompt = {}, .text = std::move(tail)});
    }
    std::erase_if(train_docs, [](const Record& d) { return d.text.empty(); });
    log(fmt::format("prepare: only {} documents, so the last {:.0f}% of each goes to val",
                    train_docs.size(), 100 * f));
  }
  TIDE_CHECK(!train_docs.empty() && !val_docs.empty(),
             "the input is too small to split into train and val ({} documents); give more {} or "
             "a larger --val-fraction",
             train_docs.size() + val_docs.size(), jsonl ? "records" : "text");

  // 3. The tokenizer.
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  TIDE_CHECK(!ec, "--out-dir {}: cannot create it ({}); choose a writable directory",
             options.out_dir, ec.message());
  Tokenizer tok;
  if (gpt2) {
    tok = Tokenizer::load_gpt2(options.gpt2_encoder, options.gpt2_vocab);
    log(fmt::format("prepare: loaded GPT-2 tokenizer, {} tokens", tok.vocab_size()));
  } else if (from_file) {
    tok = Tokenizer::load(options.tokenizer_file);
    log(fmt::format("prepare: loaded {}, {} tokens", options.tokenizer_file, tok.vocab_size()));
    if (tok.vocab_size() > 65536)
      log(
          fmt::format("prepare: {} tokens do not fit uint16 ids: the shards hold uint32 ids "
                      "(llm.c's Llama 3 format)",
                      tok.vocab_size()));
  } else {
    step_start = Clock::now();
    WordCounts words;
    for (const Record& d : train_docs) {
      count_words(Pretokenizer::gpt2(), d.prompt, words);
      count_words(Pretokenizer::gpt2(), d.text, words);
    }
    log(fmt::format("prepare: training BPE to {} tokens on {} distinct words", options.vocab_size,
                    words.size()));
    // A progress line at most every 2 seconds (and at the end): big vocabularies take minutes.
    auto last = Clock::now();
    tok = Tokenizer::train(words, options.vocab_size, [&](int done, int total) {
      const auto now = Clock::now();
      if (done < total && now - last < std::chrono::seconds(2)) return;
      last = now;
      log(fmt::format("prepare:   {}/{} merges", done, total));
    });
    log(fmt::format("prepare: trained {} merges in {:.2f} s", tok.num_merges(),
                    seconds_since(step_start)));
    if (tok.vocab_size() < options.vocab_size) {
      log(fmt::format("prepare: the text supports only {} tokens (asked for {}); using {}",
                      tok.vocab_size(), options.vocab_size, tok.vocab_size()));
    }
  }
  PrepareResult r;
  r.tokenizer_path = (fs::path(options.out_dir) / "tokenizer.json").string();
  tok.save(r.tokenizer_path);

  // 4. Encode and write the shards.
  step_start = Clock::now();
  const Encoded train = encode_documents(tok, train_docs, special);
  const Encoded val = encode_documents(tok, val_docs, special);
  const std::vector<int32_t>& train_tokens = train.tokens;
  const std::vector<int32_t>& val_tokens = val.tokens;
  log(fmt::format(
      "prepare: encoded {} train tokens, {} val tokens ({:.2f} bytes/token) in {:.2f} s",
      train_tokens.size(), val_tokens.size(),
      static_cast<double>(input_bytes) / (train_tokens.size() + val_tokens.size()),
      seconds_since(step_start)));
  r.train_path = (fs::path(options.out_dir) / "train.bin").string();
  r.val_path = (fs::path(options.out_dir) / "val.bin").string();
  // Both shards carry a loss mask when either needs one (a val split may hold only text records).
  const bool masked = !train.loss_mask.empty() || !val.loss_mask.empty();
  const auto mask_of = [&](const Encoded& e) {
    return masked && e.loss_mask.empty() ? std::vector<uint8_t>(e.tokens.size(), 1) : e.loss_mask;
  };
  // uint32 ids exactly when the vocabulary needs them (shard.h), for both shards alike.
  write_token_shard(r.train_path, std::span<const int32_t>(train_tokens), mask_of(train),
                    tok.vocab_size());
  write_token_shard(r.val_path, std::span<const int32_t>(val_tokens), mask_of(val),
                    tok.vocab_size());
  r.loss_mask = masked;
  r.train_loss_tokens = masked ? std::count(train.loss_mask.begin(), train.loss_mask.end(), 1)
                               : static_cast<int64_t>(train_tokens.size());
  if (masked) {
    log(fmt::format("prepare: loss mask: {} of {} train tokens are in the loss (prompts are not)",
                    r.train_loss_tokens, train_tokens.size()));
  }

  r.vocab_size = tok.vocab_size();
  r.eot_id = tok.eot_id();
  r.input_bytes = input_bytes;
  r.train_documents = static_cast<int64_t>(train_docs.size());
  r.val_documents = static_cast<int64_t>(val_docs.size());
  r.train_tokens = static_cast<int64_t>(train_tokens.size());
  r.val_tokens = static_cast<int64_t>(val_tokens.size());
  if (val.loss_mask.empty()) {
    r.val_unigram_entropy = unigram_entropy(val_tokens, tok.vocab_size());
  } else {  // the tokens the loss counts
    std::vector<int32_t> counted;
    for (size_t i = 0; i < val_tokens.size(); ++i) {
      if (val.loss_mask[i] != 0) counted.push_back(val_tokens[i]);
    }
    r.val_unigram_entropy = unigram_entropy(counted, tok.vocab_size());
  }

  // 5. meta.json: what the trainer needs to size the model and judge its loss.
  const nlohmann::json meta = {
      {"vocab_size", r.vocab_size},
      {"eot_id", r.eot_id},
      {"tokenizer", gpt2        ? "gpt2"
                    : from_file ? "file"
                                : "bpe"},
      {"tokenizer_file", "tokenizer.json"},
      {"train_file", "train.bin"},
      {"val_file", "val.bin"},
      {"train_tokens", r.train_tokens},
      {"val_tokens", r.val_tokens},
      {"loss_mask", r.loss_mask},
      {"train_loss_tokens", r.train_loss_tokens},
      {"train_documents", r.train_documents},
      {"val_documents", r.val_documents},
      {"input_bytes", r.input_bytes},
      {"sources", sources},
      {"doc_separator", options.doc_separator},
      {"val_fraction", options.val_fraction},
      // In nats: the loss of predicting each val token from val's own token frequencies (a model
      // must beat it to have learned anything beyond frequencies), and ln(vocab_size), the loss
      // of a uniform guess, about where training starts.
      {"val_unigram_entropy", r.val_unigram_entropy},
      {"uniform_loss", std::log(static_cast<double>(r.vocab_size))},
  };
  r.meta_path = write_prepared_meta(options.out_dir, meta);
  log(fmt::format("prepare: wrote {}, {}, {}, {} (val unigram entropy {:.3f} nats)",
                  r.tokenizer_path, r.train_path, r.val_path, r.meta_path, r.val_unigram_entropy));
  return r;
}

std::string write_prepared_meta(const std::string& out_dir, const nlohmann::json& meta) {
  const std::string path = (fs::path(out_dir) / "meta.json").string();
  std::ofstream out(path);
  TIDE_CHECK(out.good(), "{}: cannot open for writing; check that the directory is writable", path);
  out << meta.dump(2) << "\n";
  return path;
}

bool prepared_corpus_exists(const std::string& out_dir) {
  return fs::is_regular_file(fs::path(out_dir) / "meta.json");
}

PrepareResult read_prepared_corpus(const std::string& out_dir) {
  const fs::path dir(out_dir);
  const std::string meta_path = (dir / "meta.json").string();
  const std::string fix = fmt::format("re-create it with `tide prepare --out-dir {}`", out_dir);
  std::error_code ec;
  TIDE_CHECK(!fs::is_directory(meta_path, ec), "{}: is a directory, not a file; {}", meta_path,
             fix);
  std::ifstream in(meta_path);
  TIDE_CHECK(in.good(), "{}: not found; prepare the data first with `tide prepare --out-dir {}`",
             meta_path, out_dir);
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    TIDE_FAIL("{}: unreadable: not valid JSON ({}); {}", meta_path, json_error_text(e), fix);
  } catch (const std::exception& e) {
    TIDE_FAIL("{}: cannot read it ({}); {}", meta_path, e.what(), fix);
  }
  TIDE_CHECK(meta.is_object(), "{}: unreadable: it holds a JSON {}, not an object; {}", meta_path,
             meta.type_name(), fix);
  auto has = [&](const char* key, bool ok) {
    TIDE_CHECK(meta.contains(key) && ok,
               "{}: unreadable: field \"{}\" is missing or of the wrong type{}; {}", meta_path, key,
               meta.contains(key) ? fmt::format(" (got {})", meta[key].dump()) : "", fix);
  };
  auto str = [&](const char* key) {
    has(key, meta.contains(key) && meta[key].is_string());
    return meta[key].get<std::string>();
  };
  auto count = [&](const char* key, int64_t hi) {
    has(key, meta.contains(key) && meta[key].is_number_integer() && meta[key].get<int64_t>() >= 0 &&
                 meta[key].get<int64_t>() <= hi);
    return meta[key].get<int64_t>();
  };
  PrepareResult r;
  r.meta_path = meta_path;
  r.tokenizer_path = (dir / str("tokenizer_file")).string();
  r.train_path = (dir / str("train_file")).string();
  r.val_path = (dir / str("val_file")).string();
  r.vocab_size = static_cast<int>(count("vocab_size", INT32_MAX));
  r.eot_id = static_cast<int>(count("eot_id", INT32_MAX - 1));
  r.input_bytes = count("input_bytes", INT64_MAX);
  r.train_documents = count("train_documents", INT64_MAX);
  r.val_documents = count("val_documents", INT64_MAX);
  r.train_tokens = count("train_tokens", INT64_MAX);
  r.val_tokens = count("val_tokens", INT64_MAX);
  has("val_unigram_entropy",
      meta.contains("val_unigram_entropy") && meta["val_unigram_entropy"].is_number());
  r.val_unigram_entropy = meta["val_unigram_entropy"].get<double>();
  return r;
}

}  // namespace tide
