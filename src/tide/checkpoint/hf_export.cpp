// `tide export` (see hf_export.h): checkpoint -> Hugging Face folder (GPT-2 or the Llama
// family), streamed tensor by tensor. Memory: one buffer the size of the largest transposed tensor
// (f32) and two fixed buffers (source bytes, f32 output), allocated once; nothing else grows with
// the model.
#include "tide/checkpoint/hf_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/checkpoint_meta.h"
#include "tide/checkpoint/hf_tokenizer_files.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/dtype.h"
#include "tide/data/tokenizer.h"
#include "tide/model/layout.h"

namespace tide {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

// A checkpoint to read tensors from: element ranges of flattened tensors, in the stored dtype.
class Source {
 public:
  virtual ~Source() = default;
  CheckpointInfo info;
  DType compute = DType::F32;
  virtual bool contains(const std::string& name) const = 0;
  virtual DType dtype(const std::string& name) const = 0;
  virtual void read(const std::string& name, int64_t begin, int64_t end, void* dst) const = 0;
};

class FileSource : public Source {
 public:
  explicit FileSource(const std::string& path) : r_(path, "checkpoint") {
    info = checkpoint_info_from_meta(r_.metadata(), fmt::format("checkpoint '{}'", path));
    const ChunkLayout layout = make_layout(info.config);
    // Every tensor the export may read has the model's shape.
    for (const TensorSlot& s : layout.slots())
      for (const char* prefix : {"", "master."}) {
        const std::string name = prefix + s.name;
        if (!r_.contains(name)) continue;
        const SafetensorsEntry& e = r_.entry(name);
        TIDE_CHECK(e.shape == s.shape,
                   "checkpoint '{}': tensor '{}' has shape {} but a {} model's is {}", path, name,
                   e.shape.str(), info.config.str(), s.shape.str());
      }
    TIDE_CHECK(r_.contains("wte"),
               "checkpoint '{}' has no tensor 'wte'; it is damaged or not a GPT checkpoint", path);
    compute = r_.entry("wte").dtype;
  }
  bool contains(const std::string& name) const override { return r_.contains(name); }
  DType dtype(const std::string& name) const override { return r_.entry(name).dtype; }
  void read(const std::string& name, int64_t begin, int64_t end, void* dst) const override {
    const size_t esz = dtype_size(dtype(name));
    r_.read_bytes(name, static_cast<uint64_t>(begin) * esz,
                  static_cast<uint64_t>(end - begin) * esz, dst);
  }

 private:
  SafetensorsReader r_;
};

class ShardedSource : public Source {
 public:
  explicit ShardedSource(const std::string& dir) : r_(dir, /*verify_data=*/true) {
    info = r_.info().info;
    compute = r_.info().compute_dtype;
  }
  bool contains(const std::string& name) const override { return r_.contains(name); }
  DType dtype(const std::string& name) const override { return r_.dtype(name); }
  void read(const std::string& name, int64_t begin, int64_t end, void* dst) const override {
    r_.read(name, begin, end, dst);
  }

 private:
  ShardedCheckpointReader r_;
};

std::string errno_text() {
  return std::strerror(errno);
}

// The output file being written: removed unless completed.
struct OutFile {
  std::string path;
  int fd = -1;
  bool committed = false;
  ~OutFile() {
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
  void write(const void* data, size_t n, const std::string& target) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t put = ::write(fd, p, std::min<size_t>(n, 1u << 30));
      if (put < 0 && errno == EINTR) continue;
      TIDE_CHECK(put > 0, "writing '{}' failed: {}; check the free space on its disk", target,
                 put < 0 ? errno_text() : "no bytes written");
      p += put;
      n -= static_cast<size_t>(put);
    }
  }
  // fsync, close, rename over `target`.
  void commit(const std::string& target) {
    TIDE_CHECK(::fsync(fd) == 0, "writing '{}' failed: fsync: {}", target, errno_text());
    const int f = fd;
    fd = -1;
    TIDE_CHECK(::close(f) == 0, "writing '{}' failed: close: {}", target, errno_text());
    TIDE_CHECK(::rename(path.c_str(), target.c_str()) == 0, "cannot write '{}': rename: {}", target,
               errno_text());
    committed = true;
  }
};

OutFile open_out(const std::string& target) {
  OutFile f;
  f.path = fmt::format("{}.tmp.{}", target, ::getpid());
  f.fd = ::open(f.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0) {
    const std::string err = errno_text();
    f.path.clear();
    TIDE_FAIL("cannot write '{}': {}; check the directory is writable", target, err);
  }
  return f;
}

// One tensor of the output: where its values come from and its HF shape.
struct OutTensor {
  std::string hf_name;
  std::string source;  // the checkpoint tensor read
  Shape shape;         // what is read of it, in tide's layout: rows [row_begin, ...) of it
  bool transposed = false;
  int64_t row_begin = 0;  // a row range of a fused Llama tensor (q/k/v, gate/up)
};

}  // namespace

std::string hf_gpt2_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return "transformer." + name + ".weight";
  return "transformer." + name;
}

bool hf_gpt2_transposed(const std::string& name) {
  for (const char* w :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (name.starts_with("h.") && name.ends_with(w)) return true;
  return false;
}

json hf_gpt2_config(const GPTConfig& c, std::optional<int> eot_id, DType dtype) {
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"activation_function", "gelu_new"},  // tide's GELU is GPT-2's tanh form
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_embd", c.n_embd},
            {"n_inner", nullptr},  // 4 n_embd
            {"vocab_size", c.vocab_size},
            {"n_positions", c.max_seq_len},
            {"n_ctx", c.max_seq_len},
            {"layer_norm_epsilon", 1e-5},  // kernels/cpu/layernorm.cpp
            {"resid_pdrop", c.dropout},
            {"embd_pdrop", c.dropout},
            {"attn_pdrop", c.dropout},
            {"initializer_range", 0.02},
            {"scale_attn_weights", true},
            {"scale_attn_by_inverse_layer_idx", false},
            {"reorder_and_upcast_attn", false},
            {"tie_word_embeddings", true},
            {"use_cache", true},
            {"torch_dtype", dtype == DType::BF16 ? "bfloat16" : "float32"}};
  // The tokenizer's <|endoftext|>; without one, GPT-2's tokenizer's (50256) for its vocabulary,
  // else none (HF's default, 50256, would be outside the vocabulary).
  const json eot = eot_id ? json(*eot_id) : c.vocab_size == 50257 ? json(50256) : json(nullptr);
  j["bos_token_id"] = eot;
  j["eos_token_id"] = eot;
  return j;
}

HfExportResult export_hf(const std::string& checkpoint, const std::string& out_dir,
                         const HfExportOptions& options) {
  // 1. The input, checked whole, before anything is created.
  TIDE_CHECK(options.dtype == DType::F32 || options.dtype == DType::BF16,
             "export: model.safetensors in {} is not offered; use f32 or bf16",
             dtype_name(options.dtype));
  const size_t out_size = dtype_size(options.dtype);
  std::unique_ptr<Source> src;
  std::error_code dir_ec;
  if (std::filesystem::is_directory(checkpoint, dir_ec))  // a sharded one, or says why not
    src = std::make_unique<ShardedSource>(checkpoint);
  else
    src = std::make_unique<FileSource>(checkpoint);
  HfExportResult result;
  result.config = src->info.config;
  const GPTConfig& config = result.config;
  const bool llama = config.is_llama();
  TIDE_CHECK(llama || options.architecture.empty(),
             "export --architecture {}: the checkpoint holds a GPT-2 model, written as "
             "GPT2LMHeadModel; drop --architecture",
             options.architecture);
  const std::string model_type = llama ? hf_llama_model_type(config, options.architecture) : "gpt2";
  const ChunkLayout layout = make_layout(src->info.config);
  const bool use_master = src->compute != DType::F32 && src->contains("master.wte");
  result.source = use_master ? "master weights (f32)"
                             : fmt::format("parameters ({})", dtype_name(src->compute));
  std::vector<OutTensor> outs;
  int64_t largest_transposed = 0;
  for (const TensorSlot& s : layout.slots()) {
    const std::string source = (use_master ? "master." : "") + s.name;
    TIDE_CHECK(src->contains(source), "checkpoint '{}' has no tensor '{}'; it is damaged",
               checkpoint, source);
    const DType t = src->dtype(source);
    TIDE_CHECK(t == DType::F32 || t == DType::BF16 || t == DType::F16,
               "checkpoint '{}': tensor '{}' is {}, not a float type", checkpoint, source,
               dtype_name(t));
    if (!llama) {
      OutTensor o{hf_gpt2_name(s.name), source, s.shape, hf_gpt2_transposed(s.name)};
      if (o.transposed) {
        TIDE_ASSERT(s.shape.ndim == 2);
        largest_transposed = std::max(largest_transposed, s.numel);
      }
      outs.push_back(std::move(o));
      continue;
    }
    // A tied head is the embedding: HF's tied files hold no lm_head.weight.
    for (const HfOutTensor& h : hf_llama_tensors(config, s.name)) {
      Shape part = s.shape;
      part.dims[0] = h.row_end - h.row_begin;
      TIDE_ASSERT(h.row_end <= s.shape[0]);
      outs.push_back(OutTensor{h.hf_name, source, part, false, h.row_begin});
    }
  }

  // The tokenizer: given, or the one the checkpoint names (relative to its folder).
  std::string tok_path = options.tokenizer;
  if (tok_path.empty() && !src->info.tokenizer.empty()) {
    fs::path ckpt(checkpoint);
    if (!ckpt.has_filename()) ckpt = ckpt.parent_path();  // "dir/ckpt/"
    tok_path = (ckpt.parent_path() / src->info.tokenizer).string();
    std::error_code tok_ec;
    TIDE_CHECK(fs::is_regular_file(tok_path, tok_ec),
               "checkpoint '{}' names the tokenizer '{}', which is not there; copy it back, or "
               "pass --tokenizer <tokenizer.json>",
               checkpoint, tok_path);
  }
  std::optional<HfTokenizerFiles> tok_files;
  std::optional<int> eot_id, bos_id;
  if (!tok_path.empty()) {
    const Tokenizer tok = Tokenizer::load(tok_path);
    tok_files = hf_tokenizer_files(tok, src->info.config, tok_path);
    eot_id = tok.eot_id();
    // What tide puts before a document (Llama 3: <|begin_of_text|>; else end-of-text).
    const std::vector<int32_t> prefix = tok.document_prefix();
    bos_id = prefix.empty() ? tok.eot_id() : prefix.front();
    result.tokenizer = tok_path;
  }
  const json hf_config = llama ? hf_llama_config(config, model_type, bos_id, eot_id, options.dtype)
                               : hf_gpt2_config(config, eot_id, options.dtype);
  result.architecture = hf_config["architectures"][0].get<std::string>();

  // 2. The output folder.
  const fs::path dir(out_dir);
  const std::string model_path = (dir / "model.safetensors").string();
  const std::string config_path = (dir / "config.json").string();
  std::error_code ec;
  TIDE_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec),
             "cannot export to '{}': it is a file; pass a directory", out_dir);
  std::vector<std::string> outputs = {model_path};
  for (const std::string& name : hf_tokenizer_file_names())
    outputs.push_back((dir / name).string());
  for (const std::string& path : outputs)
    TIDE_CHECK(options.overwrite || !fs::exists(path, ec),
               "'{}' exists; pass --overwrite to replace it, or choose another directory", path);
  fs::create_directories(dir, ec);
  TIDE_CHECK(!ec, "cannot create '{}': {}", out_dir, ec.message());

  // 3. The header: every shape is known up front.
  ojson header = ojson::object();
  header["__metadata__"] = {{"format", "pt"}};  // what transformers checks
  uint64_t offset = 0;
  for (const OutTensor& o : outs) {
    const Shape hf = o.transposed ? Shape{o.shape[1], o.shape[0]} : o.shape;
    ojson shape = ojson::array();
    for (int d = 0; d < hf.ndim; ++d) shape.push_back(hf[d]);
    const uint64_t nbytes = static_cast<uint64_t>(hf.numel()) * out_size;
    header[o.hf_name] = {{"dtype", options.dtype == DType::BF16 ? "BF16" : "F32"},
                         {"shape", shape},
                         {"data_offsets", ojson::array({offset, offset + nbytes})}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t total = offset;

  // 4. The tensors, through the buffers.
  const size_t buf_elems = std::max<size_t>(options.buffer_bytes / 4, 1024);
  std::vector<char> raw(buf_elems * 4);  // source bytes (any dtype)
  std::vector<float> out(buf_elems);     // f32 output
  std::vector<float> whole(static_cast<size_t>(largest_transposed));
  result.buffer_bytes = raw.size() + out.size() * 4 + whole.size() * 4;
  std::vector<uint16_t> narrow(options.dtype == DType::BF16 ? buf_elems : 0);  // bf16 output
  result.buffer_bytes += narrow.size() * 2;

  // Elements [begin, begin + n) of `name` as f32 into dst (n <= buf_elems unless f32).
  auto read_f32 = [&](const std::string& name, int64_t begin, int64_t n, float* dst) {
    const DType t = src->dtype(name);
    if (t == DType::F32) return src->read(name, begin, begin + n, dst);
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min<int64_t>(n - done, static_cast<int64_t>(buf_elems));
      src->read(name, begin + done, begin + done + m, raw.data());
      const auto* h = reinterpret_cast<const uint16_t*>(raw.data());
      for (int64_t i = 0; i < m; ++i)
        dst[done + i] = t == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
      done += m;
    }
  };

  OutFile f = open_out(model_path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  f.write(len, 8, model_path);
  f.write(text.data(), text.size(), model_path);
  uint64_t written = 0, next_report = total / 10;
  // m values of `out` into the file, in the output dtype (bf16: rounded, buf_elems at a time).
  auto emit = [&](int64_t m) {
    if (options.dtype == DType::F32)
      return f.write(out.data(), static_cast<size_t>(m) * 4, model_path);
    for (int64_t done = 0; done < m;) {
      const int64_t k = std::min<int64_t>(m - done, static_cast<int64_t>(narrow.size()));
      convert_elements(out.data() + done, DType::F32, narrow.data(), DType::BF16, k);
      f.write(narrow.data(), static_cast<size_t>(k) * 2, model_path);
      done += k;
    }
  };
  for (const OutTensor& o : outs) {
    const int64_t n = o.shape.numel();
    if (!o.transposed) {
      const int64_t base = o.row_begin * (n / o.shape[0]);  // rows are contiguous
      for (int64_t e = 0; e < n;) {
        const int64_t m = std::min<int64_t>(n - e, static_cast<int64_t>(buf_elems));
        read_f32(o.source, base + e, m, out.data());
        emit(m);
        e += m;
      }
    } else {
      // tide (R, K) -> HF (K, R): the whole tensor, then output rows in batches.
      const int64_t R = o.shape[0], K = o.shape[1];
      read_f32(o.source, 0, n, whole.data());
      const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(buf_elems) / R);
      for (int64_t i0 = 0; i0 < K; i0 += rows) {
        const int64_t i1 = std::min(K, i0 + rows);
        if ((i1 - i0) * R > static_cast<int64_t>(out.size())) out.resize((i1 - i0) * R);
        for (int64_t j = 0; j < R; ++j) {
          const float* row = whole.data() + j * K;
          for (int64_t i = i0; i < i1; ++i) out[(i - i0) * R + j] = row[i];
        }
        emit((i1 - i0) * R);
      }
    }
    written += static_cast<uint64_t>(n) * out_size;
    ++result.tensors;
    if (options.progress && (written >= next_report || written == total)) {
      options.progress(fmt::format("export: {:3d}% ({:.1f} of {:.1f} MiB) {}",
                                   static_cast<int>(100 * written / std::max<uint64_t>(total, 1)),
                                   written / 1048576.0, total / 1048576.0, o.hf_name));
      while (next_report <= written && next_report < total) next_report += total / 10 + 1;
    }
  }
  f.commit(model_path);
  result.file_bytes = 8 + text.size() + total;

  auto write_text = [](const std::string& path, const std::string& text) {
    OutFile c = open_out(path);
    c.write(text.data(), text.size(), path);
    c.commit(path);
  };
  write_text(config_path, hf_config.dump(2) + "\n");
  if (tok_files) {
    const std::vector<std::string> texts = {tok_files->tokenizer_json, tok_files->tokenizer_config,
                                            tok_files->special_tokens_map,
                                            tok_files->generation_config};
    for (size_t i = 0; i < texts.size(); ++i)
      write_text((dir / hf_tokenizer_file_names()[i]).string(), texts[i]);
  } else {
    // An earlier export's tokenizer files would describe another model (--overwrite).
    for (const std::string& name : hf_tokenizer_file_names()) fs::remove(dir / name, ec);
  }
  return result;
}

}  // namespace tide
