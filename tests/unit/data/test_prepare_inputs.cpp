// `tide prepare`'s inputs (data/input_file.h): gzip-compressed text is read as the text it
// holds, and the binary files of a directory are reported in one summary line.

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>

#include "test_util.h"
#include "tide/core/error.h"
#include "tide/data/input_file.h"
#include "tide/data/prepare.h"

namespace tide {
namespace {

using test::TempDir;
using test::write_file;

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  gzclose(f);
}

std::string fortunes(const std::string& what, int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += fmt::format("{} {}: the early bird gets the worm.\n%\n", what, i);
  return s;
}

TEST(PrepareInputs, GzipTextIsReadAsItsText) {
  TempDir dir;
  const std::string text = fortunes("Fortune", 50);
  write_gzip(dir / "a.gz", text);
  EXPECT_EQ(read_input_file(dir / "a.gz"), text);
  EXPECT_FALSE(input_looks_binary(dir / "a.gz"));  // the compressed bytes hold NULs; the text not
  // A truncated copy is an error, not a shorter text.
  write_gzip(dir / "whole.gz", fortunes("Fortune", 2000));
  std::filesystem::copy_file(dir / "whole.gz", dir / "cut.gz");
  std::filesystem::resize_file(dir / "cut.gz", std::filesystem::file_size(dir / "cut.gz") / 2);
  EXPECT_THROW(read_input_file(dir / "cut.gz"), Error);
}

TEST(PrepareInputs, GzipAndPlainCorporaPrepareTheSame) {
  TempDir dir;
  std::filesystem::create_directories(dir / "plain");
  std::filesystem::create_directories(dir / "gz");
  write_file(dir / "plain/a", fortunes("Fortune", 40));
  write_file(dir / "plain/b", fortunes("Quote", 40));
  write_gzip(dir / "gz/a.gz", fortunes("Fortune", 40));
  write_gzip(dir / "gz/b.gz", fortunes("Quote", 40));
  auto run = [&](const std::string& in) {
    PrepareOptions o;
    o.inputs = {dir / in};
    o.out_dir = dir / ("out_" + in);
    o.vocab_size = 300;
    o.val_fraction = 0.1;
    o.doc_separator = "%";
    o.log = [](const std::string&) {};
    return prepare_corpus(o);
  };
  const PrepareResult plain = run("plain"), gz = run("gz");
  EXPECT_EQ(gz.input_bytes, plain.input_bytes);
  EXPECT_EQ(gz.train_tokens, plain.train_tokens);
  EXPECT_EQ(gz.val_tokens, plain.val_tokens);
  EXPECT_EQ(gz.val_unigram_entropy, plain.val_unigram_entropy);
}

TEST(PrepareInputs, SkippedBinaryFilesAreOneLine) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  write_file(dir / "in/text", fortunes("Fortune", 60));
  for (int i = 0; i < 5; ++i)
    write_file(dir / fmt::format("in/index{}.dat", i), std::string("\0\1\2", 3));
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.out_dir = dir / "out";
  o.vocab_size = 300;
  o.doc_separator = "%";
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  const PrepareResult r = prepare_corpus(o);
  int skip_lines = 0;
  for (const std::string& l : lines)
    if (l.find("skip") != std::string::npos) {
      ++skip_lines;
      EXPECT_NE(l.find("skipped 5 binary files"), std::string::npos) << l;
      EXPECT_NE(l.find("index0.dat"), std::string::npos) << l;
    }
  EXPECT_EQ(skip_lines, 1);
  EXPECT_EQ(r.train_documents + r.val_documents, 60);
}

}  // namespace
}  // namespace tide
