// Checkpoints as safetensors: the byte layout of the spec, bitwise round trips (parameters and
// optimizer state, f32 and bf16 stores), and refusal of every kind of damaged or crafted file
// with one clear error line: truncation at every length, every bit of a header flipped, bits
// of the data flipped, and crafted headers (with a valid checksum, so that the structural
// checks themselves are what is tested).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/core/rng.h"

using namespace tide;
using tide::test::error_of;
using tide::test::slurp;
using tide::test::temp_dir;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kPrefix = R"({"__metadata__":{"checksum":")";

// (Removed first: truncating a file and rewriting it makes ext4 flush it at close, which
// would make the thousands of damaged files below slow.)
void spit(const std::string& path, const std::string& bytes) {
  fs::remove(path);
  std::ofstream(path, std::ios::binary) << bytes;
}

// Files in `dir` whose name has ".tmp." (left-over temporaries of a save).
int temporaries_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
  return n;
}

GPTConfig tiny() {
  GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 16;
  c.max_seq_len = 8;
  return c;
}

// Fills every kind the store owns with its own random pattern (so a mix-up of kinds shows).
void fill(ChunkStore& s, uint64_t seed) {
  for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::MASTER, ChunkKind::ADAM_M, ChunkKind::ADAM_V}) {
    if (!s.has(k) || (k == ChunkKind::MASTER && s.compute_dtype() == DType::F32)) continue;
    const PhiloxStream rng{seed, static_cast<uint64_t>(k)};
    uint64_t i = 0;
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const Tensor t = s.tensor(k, id);
      if (t.dtype == DType::F32)
        for (int64_t e = 0; e < t.numel(); ++e) t.f32()[e] = rng.normal(i++);
      else
        for (int64_t e = 0; e < t.numel(); ++e) t.u16()[e] = static_cast<uint16_t>(rng.uint(i++));
    }
  }
}

bool same(const ChunkStore& a, const ChunkStore& b, ChunkKind k) {
  for (int id = 0; id < a.layout().num_tensors(); ++id) {
    const Tensor x = a.tensor(k, id), y = b.tensor(k, id);
    if (x.nbytes() != y.nbytes() || std::memcmp(x.data, y.data, x.nbytes()) != 0) return false;
  }
  return true;
}

ChunkStore make_store(const GPTConfig& c, DType compute, bool with_optimizer) {
  ChunkLayout lay = make_layout(c);
  lay.pack(0);
  StoreOptions o;
  o.compute_dtype = compute;
  o.with_optimizer = with_optimizer;
  return ChunkStore(std::move(lay), o);
}

// A checkpoint file in pieces.
struct Parts {
  std::string header;  // the header text, padding included
  std::string data;
};

Parts split(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}

// Header (padded to 8) + data, with the checksum recomputed when the header has tide's
// checksum field (16 hex digits) where tide puts it.
std::string assemble(std::string header, const std::string& data) {
  header.resize((header.size() + 7) / 8 * 8, ' ');
  if (header.starts_with(kPrefix) && header.size() > kPrefix.size() + 16 &&
      header[kPrefix.size() + 16] == '"' &&
      std::all_of(header.begin() + kPrefix.size(), header.begin() + kPrefix.size() + 16,
                  [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    header.replace(kPrefix.size(), 16, std::string(16, '0'));
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, header.data(), header.size());
    XXH3_64bits_update(st, data.data(), data.size());
    header.replace(kPrefix.size(), 16, fmt::format("{:016x}", XXH3_64bits_digest(st)));
    XXH3_freeState(st);
  }
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

// The file with its header JSON edited (and a valid checksum).
std::string edited(const std::string& bytes, const std::function<void(ojson&)>& edit,
                   const std::string& extra_data = "") {
  Parts p = split(bytes);
  ojson h = ojson::parse(p.header);
  edit(h);
  return assemble(h.dump(), p.data + extra_data);
}

// The file with its tide metadata edited (and a valid checksum).
std::string edited_meta(const std::string& bytes,
                        const std::function<void(nlohmann::json&)>& edit) {
  return edited(bytes, [&](ojson& h) {
    auto m = nlohmann::json::parse(h["__metadata__"]["tide"].get<std::string>());
    edit(m);
    h["__metadata__"]["tide"] = m.dump();
  });
}

// The error `f` throws: one line, naming `path`, containing `text` (elsewhere than in the
// path: the test directories have names like "checksum").
void expect_error(const std::function<void()>& f, const std::string& path,
                  const std::string& text) {
  const std::string e = error_of(f);
  std::string rest = e;
  for (size_t at; (at = rest.find(path)) != std::string::npos;)
    rest.replace(at, path.size(), "<path>");
  EXPECT_NE(rest.find(text), std::string::npos) << "expected '" << text << "' in: " << e;
  EXPECT_NE(e.find(path), std::string::npos) << "expected the path in: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "more than one line: " << e;
}

// A tiny model's checkpoint (parameters only) and its bytes.
struct Saved {
  std::string dir, path, bytes;
};
Saved saved_tiny(const std::string& name, bool with_optimizer_state = false) {
  Saved s;
  s.dir = temp_dir(name);
  s.path = s.dir + "/model.ckpt";
  GPT model(tiny(), ActivationPolicy::SAVE_ALL);
  fill(model.store(), 7);
  CheckpointInfo info;
  info.step = 3;
  save_checkpoint(s.path, model, info, with_optimizer_state);
  s.bytes = slurp(s.path);
  return s;
}

// Loading `bytes` (written to a file) fails with `text` in the message, for both the info
// and the weights when `info_too`.
void expect_load_error(const Saved& s, const std::string& bytes, const std::string& text,
                       bool info_too = true) {
  const std::string path = s.dir + "/bad.ckpt";
  spit(path, bytes);
  GPT model(tiny(), ActivationPolicy::SAVE_ALL, 0, false);
  expect_error([&] { load_checkpoint(path, model); }, path, text);
  if (info_too) expect_error([&] { read_checkpoint_info(path); }, path, text);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The safetensors layer

TEST(Safetensors, LayoutFollowsTheSpec) {
  const std::string dir = temp_dir("layout");
  const std::string path = dir + "/sub/dir/t.safetensors";  // parents are created
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
  const int32_t c = -7;
  write_safetensors(path,
                    {{"a", DType::F32, {2, 3}, a},
                     {"b", DType::BF16, {3}, b},
                     {"c", DType::I32, {}, &c},  // a scalar
                     {"empty", DType::F16, {0, 4}, nullptr}},
                    {{"hello", "world"}});
  const std::string bytes = slurp(path);
  const Parts p = split(bytes);
  EXPECT_EQ(p.header.size() % 8, 0u);
  EXPECT_TRUE(p.header.starts_with(kPrefix));
  const auto h = nlohmann::json::parse(p.header);
  EXPECT_EQ(h["a"],
            nlohmann::json::parse(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"));
  EXPECT_EQ(h["b"],
            nlohmann::json::parse(R"({"dtype":"BF16","shape":[3],"data_offsets":[24,30]})"));
  EXPECT_EQ(h["c"], nlohmann::json::parse(R"({"dtype":"I32","shape":[],"data_offsets":[30,34]})"));
  EXPECT_EQ(h["empty"],
            nlohmann::json::parse(R"({"dtype":"F16","shape":[0,4],"data_offsets":[34,34]})"));
  EXPECT_EQ(h["__metadata__"]["format"], "tide");
  EXPECT_EQ(h["__metadata__"]["tide"], R"({"hello":"world"})");
  ASSERT_EQ(p.data.size(), 34u);
  EXPECT_EQ(std::memcmp(p.data.data(), a, 24), 0);
  EXPECT_EQ(std::memcmp(p.data.data() + 24, b, 6), 0);
  EXPECT_EQ(std::memcmp(p.data.data() + 30, &c, 4), 0);
  // The checksum is XXH3-64 of the header with its digits zeroed, then the data.
  EXPECT_EQ(assemble(p.header, p.data), bytes);
  EXPECT_EQ(temporaries_in(dir + "/sub/dir"), 0);

  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), nlohmann::json({{"hello", "world"}}));
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b", "c", "empty"}));
  EXPECT_EQ(r.entry("b").offset, 8 + p.header.size() + 24);
  EXPECT_EQ(r.entry("b").nbytes, 6u);
  float a2[6];
  uint16_t b2[3];
  int32_t c2 = 0;
  r.read("a", a2, DType::F32, {2, 3});
  r.read("b", b2, DType::BF16, {3});
  r.read("c", &c2, DType::I32, {});
  EXPECT_EQ(std::memcmp(a, a2, sizeof a), 0);
  EXPECT_EQ(std::memcmp(b, b2, sizeof b), 0);
  EXPECT_EQ(c2, -7);
  // A read names what does not match.
  expect_error([&] { r.read("a", a2, DType::BF16, {2, 3}); }, path, "'a' is F32 but BF16");
  expect_error([&] { r.read("a", a2, DType::F32, {3, 2}); }, path, "shape (2, 3) but (3, 2)");
  expect_error([&] { r.read("z", a2, DType::F32, {3, 2}); }, path, "no tensor 'z'");
}

TEST(Safetensors, WriterRefusesBadTensors) {
  const std::string dir = temp_dir("writer");
  const float x = 1;
  expect_error(
      [&] {
        write_safetensors(dir + "/t", {{"a", DType::F32, {1}, &x}, {"a", DType::F32, {1}, &x}}, {});
      },
      dir, "'a' is used twice");
  expect_error(
      [&] {
        write_safetensors(dir + "/t", {{"__metadata__", DType::F32, {1}, &x}}, {});
      },
      dir, "reserved");
  expect_error(
      [&] {
        write_safetensors(dir + "/t", {{"bad\xff", DType::F32, {1}, &x}}, {});
      },
      dir, "not valid UTF-8");
  EXPECT_FALSE(fs::exists(dir + "/t"));
  EXPECT_EQ(temporaries_in(dir), 0);
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(Checkpoint, RoundTripIsBitwiseWithOptimizerState) {
  const std::string dir = temp_dir("roundtrip");
  GPT model(tiny(), ActivationPolicy::SAVE_ALL);
  fill(model.store(), 1);
  CheckpointInfo info;
  info.step = 42;
  info.tokenizer = "tokenizer.json";
  info.extra = {{"config", {{"lr", 0.01}}}, {"data_position", 1234}};
  save_checkpoint(dir + "/m.ckpt", model, info, /*with_optimizer_state=*/true);

  const CheckpointInfo back = read_checkpoint_info(dir + "/m.ckpt");
  EXPECT_EQ(back.step, 42);
  EXPECT_EQ(back.tokenizer, "tokenizer.json");
  EXPECT_EQ(back.extra, info.extra);
  EXPECT_TRUE(back.optimizer_state);
  EXPECT_EQ(back.config.str(), tiny().str());
  GPT copy(back.config, ActivationPolicy::SAVE_ALL);
  load_checkpoint(dir + "/m.ckpt", copy, /*with_optimizer_state=*/true);
  for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::ADAM_M, ChunkKind::ADAM_V})
    EXPECT_TRUE(same(model.store(), copy.store(), k)) << chunk_kind_name(k);
  // With f32 compute the master weights are the parameters: no second copy in the file.
  const SafetensorsReader r(dir + "/m.ckpt");
  EXPECT_EQ(r.entries().size(), 3u * model.store().layout().num_tensors());
  EXPECT_TRUE(r.contains("h.0.attn.c_attn.weight"));
  EXPECT_TRUE(r.contains("adam_v.h.0.attn.c_attn.weight"));
  EXPECT_FALSE(r.contains("master.wte"));
  EXPECT_EQ(temporaries_in(dir), 0);
}

TEST(Checkpoint, LoadsIntoAFreshModel) {
  const std::string dir = temp_dir("fresh");
  GPT model(tiny(), ActivationPolicy::SAVE_ALL);
  model.init_weights(5);
  fill(model.store(), 2);  // Adam state too, which a parameters-only file leaves out
  save_checkpoint(dir + "/m.ckpt", model, {});
  const CheckpointInfo info = read_checkpoint_info(dir + "/m.ckpt");
  EXPECT_FALSE(info.optimizer_state);
  GPT fresh(info.config, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  load_checkpoint(dir + "/m.ckpt", fresh);
  EXPECT_TRUE(same(model.store(), fresh.store(), ChunkKind::PARAM));
  // Such a file initialises a run but cannot resume one.
  GPT trainable(info.config, ActivationPolicy::SAVE_ALL);
  expect_error([&] { load_checkpoint(dir + "/m.ckpt", trainable, true); }, dir + "/m.ckpt",
               "was saved without optimizer state; it can initialise a run (init) but not resume "
               "one");
  // A file with optimizer state loads into a model without (sampling).
  save_checkpoint(dir + "/full.ckpt", model, {}, true);
  GPT bare(info.config, ActivationPolicy::SAVE_ALL, 0, false);
  load_checkpoint(dir + "/full.ckpt", bare);
  EXPECT_TRUE(same(model.store(), bare.store(), ChunkKind::PARAM));
  expect_error([&] { load_checkpoint(dir + "/full.ckpt", bare, true); }, dir + "/full.ckpt",
               "the model was built without one");
}

TEST(Checkpoint, Bf16StoreKeepsItsMasterWeights) {
  const std::string dir = temp_dir("bf16");
  ChunkStore store = make_store(tiny(), DType::BF16, true);
  fill(store, 3);
  CheckpointInfo info;
  info.config = tiny();
  save_checkpoint(dir + "/m.ckpt", store, info, true);
  {
    const SafetensorsReader r(dir + "/m.ckpt");
    EXPECT_EQ(r.entries().size(), 4u * store.layout().num_tensors());
    EXPECT_EQ(r.entry("wte").dtype, DType::BF16);
    EXPECT_EQ(r.entry("master.wte").dtype, DType::F32);
    EXPECT_EQ(r.entry("adam_m.wte").dtype, DType::F32);
  }
  ChunkStore copy = make_store(tiny(), DType::BF16, true);
  load_checkpoint(dir + "/m.ckpt", copy, tiny(), true);
  for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::MASTER, ChunkKind::ADAM_M, ChunkKind::ADAM_V})
    EXPECT_TRUE(same(store, copy, k)) << chunk_kind_name(k);
  // An f32 model resuming (with optimizer state) is refused, naming the dtypes...
  GPT f32(tiny(), ActivationPolicy::SAVE_ALL);
  expect_error([&] { load_checkpoint(dir + "/m.ckpt", f32, true); }, dir + "/m.ckpt",
               "tensor 'wte' is bf16 but this model holds it in f32");
  // ...one without it (tide sample) takes the master weights, bit for bit; from a file
  // without them, the bf16 parameters widened.
  auto expect_f32_params = [&](const GPT& m, ChunkKind from, const char* what) {
    for (int id = 0; id < store.layout().num_tensors(); ++id) {
      const Tensor want = store.tensor(from, id), got = m.store().tensor(ChunkKind::PARAM, id);
      std::vector<float> wide(static_cast<size_t>(want.numel()));
      convert_elements(want.data, want.dtype, wide.data(), DType::F32, want.numel());
      EXPECT_EQ(std::memcmp(wide.data(), got.data, got.nbytes()), 0)
          << what << ": " << store.layout().slot(id).name;
    }
  };
  load_checkpoint(dir + "/m.ckpt", f32);
  expect_f32_params(f32, ChunkKind::MASTER, "with master weights");
  save_checkpoint(dir + "/params.ckpt", store, info, false);
  GPT from_params(tiny(), ActivationPolicy::SAVE_ALL);
  load_checkpoint(dir + "/params.ckpt", from_params);
  expect_f32_params(from_params, ChunkKind::PARAM, "bf16 parameters widened");
  // And the other way round.
  GPT f32_model(tiny(), ActivationPolicy::SAVE_ALL);
  save_checkpoint(dir + "/f32.ckpt", f32_model, {}, true);
  expect_error([&] { load_checkpoint(dir + "/f32.ckpt", copy, tiny(), true); }, dir + "/f32.ckpt",
               "tensor 'wte' is f32 but this model holds it in bf16; load it into a model of the "
               "checkpoint's compute dtype");
}

// ---------------------------------------------------------------------------------------------
// Damaged files

TEST(Checkpoint, TruncatedFilesAreRefused) {
  const Saved s = saved_tiny("cut");
  const std::string path = s.dir + "/cut.ckpt";
  std::vector<size_t> lengths;
  for (size_t n = 0; n < 400; ++n) lengths.push_back(n);
  for (size_t n = 400; n < s.bytes.size(); n += 97) lengths.push_back(n);  // inside the data
  lengths.push_back(s.bytes.size() - 1);
  GPT model(tiny(), ActivationPolicy::SAVE_ALL, 0, false);
  for (size_t n : lengths) {
    spit(path, s.bytes.substr(0, n));
    const std::string e = error_of([&] { load_checkpoint(path, model); });
    EXPECT_NE(e.find("' is truncated"), std::string::npos) << "length " << n << ": " << e;
  }
}

TEST(Checkpoint, EveryHeaderBitFlipIsRefused) {
  const Saved s = saved_tiny("headerflip");
  const size_t header_end = 8 + split(s.bytes).header.size();
  const std::string path = s.dir + "/flip.ckpt";
  int accepted = 0;
  for (size_t byte = 0; byte < header_end; ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = s.bytes;
      b[byte] = static_cast<char>(b[byte] ^ (1 << bit));
      spit(path, b);
      const std::string e = error_of([&] { read_checkpoint_info(path); });
      if (e.empty() || e.find(path) == std::string::npos) {
        if (++accepted <= 5)
          ADD_FAILURE() << "byte " << byte << " bit " << bit << ": '" << e << "'";
      }
    }
  EXPECT_EQ(accepted, 0);
}

TEST(Checkpoint, DataBitFlipsBreakTheChecksum) {
  const Saved s = saved_tiny("dataflip");
  const size_t data_begin = 8 + split(s.bytes).header.size();
  const std::string path = s.dir + "/flip.ckpt";
  GPT model(tiny(), ActivationPolicy::SAVE_ALL, 0, false);
  std::vector<size_t> bytes;
  for (size_t i = 0; i < 16; ++i) bytes.push_back(data_begin + i);
  for (size_t i = data_begin + 16; i + 16 < s.bytes.size(); i += 61) bytes.push_back(i);
  for (size_t i = s.bytes.size() - 16; i < s.bytes.size(); ++i) bytes.push_back(i);
  for (size_t byte : bytes)
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = s.bytes;
      b[byte] = static_cast<char>(b[byte] ^ (1 << bit));
      spit(path, b);
      const std::string e = error_of([&] { load_checkpoint(path, model); });
      EXPECT_NE(e.find("corrupt: checksum mismatch"), std::string::npos)
          << "byte " << byte << " bit " << bit << ": " << e;
    }
}

TEST(Checkpoint, ChecksumMustMatch) {
  const Saved s = saved_tiny("checksum");
  // Other digits in the checksum field.
  std::string b = s.bytes;
  char& d = b[8 + kPrefix.size()];
  d = d == 'a' ? 'b' : 'a';
  expect_load_error(s, b, "corrupt: checksum mismatch");
  expect_load_error(s, edited(s.bytes, [](ojson& h) { h["__metadata__"]["checksum"] = "xyz"; }),
                    "'checksum' is 'xyz', not 16 lowercase hex digits");
  // The checksum must be where tide writes it (first field of the header).
  expect_load_error(s,
                    edited(s.bytes,
                           [](ojson& h) {
                             const std::string c = h["__metadata__"]["checksum"];
                             h["__metadata__"].erase("checksum");
                             h["__metadata__"]["checksum"] = c;
                           }),
                    "does not begin with tide's checksum field");
}

TEST(Checkpoint, TrailingBytesAreRefused) {
  const Saved s = saved_tiny("trailing");
  expect_load_error(s, s.bytes + "x", "1 trailing bytes after its last tensor");
  expect_load_error(s, assemble(split(s.bytes).header, split(s.bytes).data + "12345678"),
                    "8 trailing bytes");
}

TEST(Checkpoint, HeaderLengthMustFitTheFile) {
  const Saved s = saved_tiny("hlen");
  auto with_length = [&](uint64_t n) {
    std::string b = s.bytes;
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(n >> (8 * i));
    return b;
  };
  expect_load_error(s, with_length(uint64_t{1} << 40), "more than the 100 MiB limit");
  expect_load_error(s, with_length(~uint64_t{0}), "more than the 100 MiB limit");
  expect_load_error(s, with_length(s.bytes.size() - 7), "is truncated: its header length");
  expect_load_error(s, with_length(0), "not valid JSON");
  expect_load_error(s, assemble("not json", ""), "header is not valid JSON");
  expect_load_error(s, assemble("[1, 2]", ""), "header is a JSON array, not an object");
}

TEST(Checkpoint, CraftedTensorEntriesAreRefused) {
  const Saved s = saved_tiny("crafted");
  auto bad = [&](const std::function<void(ojson&)>& edit, const std::string& text,
                 const std::string& extra_data = "") {
    SCOPED_TRACE(text);
    expect_load_error(s, edited(s.bytes, edit, extra_data), text);
  };
  // Shapes: 5 dims (same element count), negative dims, overflowing dims, floats.
  bad(
      [](ojson& h) {
        h["wte"]["shape"] = {1, 1, 2, 8, 8};
      },
      "has 5 dims; tide tensors have at most 4");
  bad([](ojson& h) { h["wte"]["shape"] = {1, 1, 1, 2, 8, 8}; }, "has 6 dims");
  bad([](ojson& h) { h["wte"]["shape"] = {-16, -8}; }, "negative dim (-16)");
  bad(
      [](ojson& h) {
        h["wte"]["shape"] = {uint64_t{1} << 62, uint64_t{1} << 62};
      },
      "impossibly large shape");
  bad([](ojson& h) { h["wte"]["shape"] = {~uint64_t{0}}; }, "impossibly large shape");
  bad([](ojson& h) { h["wte"]["shape"] = {uint64_t{1} << 62}; }, "impossibly large shape");
  bad(
      [](ojson& h) {
        h["wte"]["shape"] = {16.0, 8};
      },
      "'shape' holds a JSON number, not an integer");
  bad([](ojson& h) { h["wte"]["shape"] = "16x8"; }, "'shape' is a JSON string, not an array");
  bad(
      [](ojson& h) {
        h["wte"]["shape"] = {16, 9};
      },
      "hold 512 bytes but a F32 tensor of shape (16, 9) has 576");
  // A name from the file shows in one line, cut short.
  bad(
      [](ojson& h) {
        h["bad\nname" + std::string(200, 'x')] = h["wte"];
        h["bad\nname" + std::string(200, 'x')]["dtype"] = "F64";
      },
      "tensor 'bad\\x0anamexxx");
  bad([](ojson& h) { h["wte" + std::string(200, 'x')] = h["wte"]; }, "... (203 bytes)");
  // Missing, extra and mistyped keys.
  bad([](ojson& h) { h["wte"].erase("dtype"); }, "tensor 'wte' has no 'dtype'");
  bad([](ojson& h) { h["wte"].erase("shape"); }, "tensor 'wte' has no 'shape'");
  bad([](ojson& h) { h["wte"].erase("data_offsets"); }, "tensor 'wte' has no 'data_offsets'");
  bad([](ojson& h) { h["wte"]["strides"] = {8, 1}; }, "unexpected key 'strides'");
  bad([](ojson& h) { h["wte"] = {1, 2, 3}; }, "tensor 'wte' is a JSON array, not an object");
  bad([](ojson& h) { h["wte"]["dtype"] = 32; }, "'dtype' is a JSON number, not a string");
  bad([](ojson& h) { h["wte"]["dtype"] = "F64"; }, "dtype 'F64', which tide does not read");
  bad([](ojson& h) { h["wte"]["data_offsets"] = "0-512"; }, "array of two integers");
  bad([](ojson& h) { h["wte"]["data_offsets"] = {0}; }, "array of two integers");
  bad([](ojson& h) { h["wte"]["data_offsets"] = {0, 512, 1024}; }, "array of two integers");
  bad([](ojson& h) { h["wte"]["data_offsets"] = {0, "512"}; }, "two non-negative integers");
  bad([](ojson& h) { h["wte"]["data_offsets"] = {-512, 0}; }, "two non-negative integers");
  // Offsets: reversed, overlapping, with a gap, past the end.
  bad([](ojson& h) { h["wte"]["data_offsets"] = {512, 0}; }, "[512, 0] begin after they end");
  bad([](ojson& h) { h["wpe"]["data_offsets"] = {508, 764}; }, "tensors 'wte' and 'wpe' overlap");
  bad([](ojson& h) { h["wpe"]["data_offsets"] = {0, 256}; }, "overlap");
  bad(
      [](ojson& h) {
        for (auto& [name, e] : h.items())
          if (name != "__metadata__" && name != "wte")
            for (auto& o : e["data_offsets"]) o = o.get<uint64_t>() + 4;
      },
      "gap of 4 bytes before tensor 'wpe'", "1234");
  bad(
      [](ojson& h) {
        h["ln_f.bias"]["data_offsets"] = {100000, 100032};
      },
      "is truncated: tensor 'ln_f.bias' ends at data byte 100032");
  bad(
      [](ojson& h) {
        h["ln_f.bias"]["data_offsets"] = {~uint64_t{0} - 32, ~uint64_t{0}};
      },
      "ends at data byte 18446744073709551615, past the end of the data");
  bad(
      [](ojson& h) {
        h["ln_f.bias"]["data_offsets"] = {uint64_t{1} << 63, (uint64_t{1} << 63) + 32};
      },
      "is truncated");
}

TEST(Checkpoint, CraftedMetadataIsRefused) {
  const Saved s = saved_tiny("meta");
  auto bad = [&](const std::function<void(ojson&)>& edit, const std::string& text) {
    SCOPED_TRACE(text);
    expect_load_error(s, edited(s.bytes, edit), text);
  };
  bad([](ojson& h) { h.erase("__metadata__"); }, "has no __metadata__ in its header");
  bad([](ojson& h) { h["__metadata__"] = "tide"; }, "__metadata__ is a JSON string, not an object");
  bad([](ojson& h) { h["__metadata__"].erase("format"); }, "__metadata__ has no 'format'");
  bad([](ojson& h) { h["__metadata__"].erase("checksum"); }, "__metadata__ has no 'checksum'");
  bad([](ojson& h) { h["__metadata__"].erase("tide"); }, "__metadata__ has no 'tide'");
  bad([](ojson& h) { h["__metadata__"]["format"] = "pt"; }, "'format' is 'pt', not 'tide'");
  bad([](ojson& h) { h["__metadata__"]["note"] = 3; }, "__metadata__ 'note' is a JSON number");
  bad([](ojson& h) { h["__metadata__"]["tide"] = "{\"model\": "; }, "'tide' is not valid JSON");

  auto bad_meta = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& text) {
    SCOPED_TRACE(text);
    expect_load_error(s, edited_meta(s.bytes, edit), text);
  };
  bad_meta([](nlohmann::json& m) { m = {1, 2}; }, "tide metadata is a JSON array, not an object");
  bad_meta([](nlohmann::json& m) { m.erase("model"); }, "has no 'model' in its metadata");
  bad_meta([](nlohmann::json& m) { m["model"] = 3; }, "'model' is a JSON number, not an object");
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len", "dropout"})
    bad_meta([&](nlohmann::json& m) { m["model"].erase(key); },
             fmt::format("has no 'model.{}' in its metadata", key));
  bad_meta([](nlohmann::json& m) { m["model"]["n_layer"] = "1"; },
           "'model.n_layer' is a JSON string, not an integer");
  bad_meta([](nlohmann::json& m) { m["model"]["n_embd"] = 8.5; },
           "'model.n_embd' is a JSON number, not an integer");
  bad_meta([](nlohmann::json& m) { m["model"]["n_layer"] = 0; }, "'model.n_layer' is 0, outside");
  bad_meta([](nlohmann::json& m) { m["model"]["n_head"] = -2; }, "'model.n_head' is -2, outside");
  bad_meta([](nlohmann::json& m) { m["model"]["vocab_size"] = int64_t{1} << 40; },
           "'model.vocab_size' is 1099511627776, outside");
  bad_meta([](nlohmann::json& m) { m["model"]["max_seq_len"] = ~uint64_t{0}; }, "outside");
  bad_meta([](nlohmann::json& m) { m["model"]["dropout"] = "0"; },
           "'model.dropout' is a JSON string, not a number");
  bad_meta([](nlohmann::json& m) { m["model"]["n_head"] = 3; },
           "impossible model shape: model.n_embd (8) must be divisible by model.n_head (3)");
  bad_meta([](nlohmann::json& m) { m["model"]["dropout"] = 1.5; }, "impossible model shape");
  bad_meta([](nlohmann::json& m) { m["step"] = -1; }, "'step' is -1, outside");
  bad_meta([](nlohmann::json& m) { m.erase("step"); }, "has no 'step'");
  bad_meta([](nlohmann::json& m) { m["tokenizer"] = 1; }, "'tokenizer' is a JSON number");
  bad_meta([](nlohmann::json& m) { m.erase("extra"); }, "has no 'extra'");
  bad_meta([](nlohmann::json& m) { m["optimizer_state"] = "no"; },
           "'optimizer_state' is a JSON string, not a boolean");
}

TEST(Checkpoint, TensorsMustMatchTheModel) {
  const Saved s = saved_tiny("match");
  // Another model shape.
  const std::string path = s.path;
  GPTConfig other = tiny();
  other.n_layer = 2;
  GPT model(other, ActivationPolicy::SAVE_ALL, 0, false);
  expect_error([&] { load_checkpoint(path, model); }, path,
               "holds a model L=1 H=2 C=8 V=16 T=8 (0.00M params) but this model is L=2");
  // A tensor of another dtype (same size), one the model does not have, one missing.
  expect_load_error(s, edited(s.bytes, [](ojson& h) { h["wpe"]["dtype"] = "I32"; }),
                    "tensor 'wpe' is i32 but this model holds it in f32", false);
  expect_load_error(s,
                    edited(
                        s.bytes,
                        [](ojson& h) {
                          const uint64_t end = h["ln_f.bias"]["data_offsets"][1];
                          h["extra.weight"] = {
                              {"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {end, end + 4}}};
                        },
                        "abcd"),
                    "holds tensor 'extra.weight', which a L=1", false);
  {
    const Parts p = split(s.bytes);
    ojson h = ojson::parse(p.header);
    h.erase("ln_f.bias");  // the last tensor: its 32 bytes end the data
    expect_load_error(s, assemble(h.dump(), p.data.substr(0, p.data.size() - 32)),
                      "has no tensor 'ln_f.bias'", false);
  }
  // The optimizer state is checked too, even when the load does not take it.
  const Saved full = saved_tiny("match_full", true);
  expect_load_error(full,
                    edited(full.bytes,
                           [](ojson& h) {
                             h["adam_v.wte"]["shape"] = {8, 16};
                           }),
                    "'adam_v.wte' has shape (8, 16) but the model's is (16, 8)", false);
}

TEST(Checkpoint, PathsThatAreNotFilesAreRefused) {
  const std::string dir = temp_dir("paths");
  expect_error([&] { read_checkpoint_info(dir); }, dir, "is a directory");
  expect_error([&] { read_checkpoint_info(dir + "/none.ckpt"); }, dir + "/none.ckpt",
               "cannot open checkpoint");
  spit(dir + "/empty.ckpt", "");
  expect_error([&] { read_checkpoint_info(dir + "/empty.ckpt"); }, dir, "is truncated: 0 bytes");
  expect_error([&] { read_checkpoint_info("/dev/null"); }, "/dev/null", "not a regular file");
}

TEST(Checkpoint, FailedSavesLeaveNoTemporaryAndKeepTheOldFile) {
  const Saved s = saved_tiny("failsave");
  GPT model(tiny(), ActivationPolicy::SAVE_ALL);
  fill(model.store(), 99);
  // A directory where the file should be.
  fs::create_directories(s.dir + "/adir/inner");
  expect_error([&] { save_checkpoint(s.dir + "/adir", model, {}); }, s.dir + "/adir",
               "is a directory");
  EXPECT_TRUE(fs::is_directory(s.dir + "/adir/inner"));
  // A regular file where a parent directory should be; places nobody can write.
  expect_error([&] { save_checkpoint(s.path + "/m.ckpt", model, {}); }, s.path,
               "cannot create its directory");
  expect_error([&] { save_checkpoint("/proc/tide_none/m.ckpt", model, {}); }, "/proc/tide_none",
               "cannot create its directory");
  expect_error([&] { save_checkpoint("/proc/self/m.ckpt", model, {}); }, "/proc/self/m.ckpt",
               "cannot create");
  // The disk fills up during the write (a file size limit stands in for it): the old
  // checkpoint stays as it was and the temporary goes.
  {
    struct rlimit old {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 3000;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    const std::string e = error_of([&] { save_checkpoint(s.path, model, {}, true); });
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_NE(e.find("writing '" + s.path + "' failed: File too large"), std::string::npos) << e;
  }
  EXPECT_EQ(slurp(s.path), s.bytes);
  EXPECT_EQ(temporaries_in(s.dir), 0);
  // And a save that works replaces it.
  save_checkpoint(s.path, model, {});
  EXPECT_NE(slurp(s.path), s.bytes);
  EXPECT_EQ(temporaries_in(s.dir), 0);
}
