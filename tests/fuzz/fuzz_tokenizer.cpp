// Fuzzes the tokenizer.json reader: the input is the file. An accepted tokenizer must encode
// and decode a fixed text (and the input itself) back to the same bytes.
#include <string>

#include "fuzz_util.h"
#include "tide/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const std::string path = fuzz::scratch_path("tokenizer");
  fuzz::write_file(path, text);
  fuzz::accepts([&] {
    const Tokenizer tok = Tokenizer::load(path);
    for (const std::string_view s :
         {std::string_view("Hello, world! It's 2024.\n  ok <|endoftext|> \xc3\xa9"), text}) {
      const std::vector<int32_t> ids = tok.encode(s);
      if (tok.decode(ids) != s) std::abort();  // decode(encode(s)) == s, always
    }
    (void)tok.token_bytes(tok.eot_id());
  });
  return 0;
}
