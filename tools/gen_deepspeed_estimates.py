#!/usr/bin/env python3
"""DeepSpeed's own ZeRO-2/3 model-state memory estimates, as a fixture for `tide estimate`.

Why: issue #11 asks that tide's per-GPU totals for large GPT models agree with DeepSpeed's
`estimate_zero2_model_states_mem_needs` / `estimate_zero3_model_states_mem_needs` (within
1.1x, or below with the difference explained). The numbers must come from DeepSpeed's code,
not from a re-typed formula, so this script runs the two functions themselves.

How: DeepSpeed's source release is unpacked (no install; importing deepspeed needs torch, the
two functions need nothing), the two function definitions are taken from
deepspeed/runtime/zero/stage_1_and_2.py and stage3.py with `ast` and executed on their own:

    pip download deepspeed==0.19.8 --no-deps --no-binary :all: -d /tmp/ds
    tar xzf /tmp/ds/deepspeed-0.19.8.tar.gz -C /tmp/ds
    python3 tools/gen_deepspeed_estimates.py --deepspeed-src /tmp/ds/deepspeed-0.19.8 \
        > tests/fixtures/deepspeed_estimates.json

total_params and largest_layer_params are computed as DeepSpeed's `model_to_params` does for
a live model: shared (tied) parameters once; the largest layer is the largest single module's
own parameters (`m.parameters(recurse=False)`), here a GPT-2 style module tree: Embedding
wte (V x h), Embedding wpe (T x h), per layer LayerNorm ln_1/ln_2 (2h each), Linear c_attn
(3h x h + 3h), c_proj (h x h + h), c_fc (4h x h + 4h), c_proj (h x 4h + h), final LayerNorm
(2h) and the LM head (tied to wte: its module still holds V x h).
"""

import argparse
import ast
import hashlib
import json
import pathlib


# GPT shapes of about 7.5B, 128B and 1T parameters. 7.5B: hidden 3072 (Megatron-LM's 8.3B
# width) with 64 layers; 128B: GPT-3 175B's width 12288 with 70 layers; 1T: Megatron-LM's
# (Narayanan et al. 2021, Table 1) 128 layers x 25600, 160 heads.
MODELS = [
    {"name": "gpt-7.5b", "n_layer": 64, "n_head": 32, "n_embd": 3072},
    {"name": "gpt-128b", "n_layer": 70, "n_head": 96, "n_embd": 12288},
    {"name": "gpt-1t", "n_layer": 128, "n_head": 160, "n_embd": 25600},
]
VOCAB = 50257
SEQ = 1024
# Nd -> (num_nodes, num_gpus_per_node): 8 GPUs per node from 8 GPUs on.
SETTINGS = [4, 16, 64, 1024]


def layout(nd):
    return (1, nd) if nd < 8 else (nd // 8, 8)


def model_params(n_layer, n_embd, vocab=VOCAB, seq=SEQ):
    h = n_embd
    modules = {
        "wte": vocab * h,
        "wpe": seq * h,
        "ln": 2 * h,
        "c_attn": 3 * h * h + 3 * h,
        "attn.c_proj": h * h + h,
        "c_fc": 4 * h * h + 4 * h,
        "mlp.c_proj": 4 * h * h + h,
        "lm_head": vocab * h,  # the tied wte, as lm_head's own parameter
    }
    per_layer = (2 * modules["ln"] + modules["c_attn"] + modules["attn.c_proj"] + modules["c_fc"]
                 + modules["mlp.c_proj"])
    total = modules["wte"] + modules["wpe"] + n_layer * per_layer + modules["ln"]
    return total, max(modules.values())


def load_functions(src):
    """The two estimate functions, executed from DeepSpeed's source files."""
    names = {
        "deepspeed/runtime/zero/stage_1_and_2.py": "estimate_zero2_model_states_mem_needs",
        "deepspeed/runtime/zero/stage3.py": "estimate_zero3_model_states_mem_needs",
    }
    fns, digests = {}, {}
    for rel, name in names.items():
        path = pathlib.Path(src) / rel
        text = path.read_text()
        digests[rel] = hashlib.sha256(text.encode()).hexdigest()
        tree = ast.parse(text)
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        assert len(defs) == 1, f"{name} not found in {path}"
        scope = {}
        exec(compile(ast.Module(body=defs, type_ignores=[]), str(path), "exec"), scope)
        fns[name] = scope[name]
    return fns, digests


def version(src):
    for line in (pathlib.Path(src) / "version.txt").read_text().splitlines():
        if line.strip():
            return line.strip()
    return "unknown"


# Llama 3.1 8B (meta-llama/Llama-3.1-8B's config.json, tide's preset llama3.1-8b): issue #28
# asks for `tide estimate` within 1.1x of DeepSpeed's ZeRO-3 estimator on it. Nd: one node of
# 8 GPUs, and 64 GPUs.
LLAMA = {"name": "llama3.1-8b", "preset": "llama3.1-8b", "n_layer": 32, "n_head": 32,
         "n_kv_head": 8, "n_embd": 4096, "intermediate_size": 14336, "vocab_size": 128256,
         "seq_len": 8192}
LLAMA_SETTINGS = [8, 64]


def llama_params(n_layer, n_embd, n_head, n_kv_head, intermediate_size, vocab_size):
    """LlamaForCausalLM's module tree, as model_to_params sees it: embed_tokens (V x h); per
    layer q_proj (h x h), k_proj and v_proj (kv x h each, kv = n_kv_head * h / n_head), o_proj
    (h x h), gate_proj and up_proj (I x h each), down_proj (h x I), two RMSNorms (h each), no
    biases; the final norm (h) and an untied lm_head (V x h)."""
    h, kv, inter = n_embd, n_kv_head * (n_embd // n_head), intermediate_size
    modules = {"embed_tokens": vocab_size * h, "q_proj": h * h, "k_proj": kv * h,
               "v_proj": kv * h, "o_proj": h * h, "gate_proj": inter * h, "up_proj": inter * h,
               "down_proj": h * inter, "norm": h, "lm_head": vocab_size * h}
    per_layer = sum(modules[k] for k in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                         "up_proj", "down_proj")) + 2 * modules["norm"]
    total = modules["embed_tokens"] + n_layer * per_layer + modules["norm"] + modules["lm_head"]
    return total, max(modules.values())


def estimates(fns, total, largest, nd):
    """DeepSpeed's five estimates for one parameter count on Nd GPUs."""
    z2 = fns["estimate_zero2_model_states_mem_needs"]
    z3 = fns["estimate_zero3_model_states_mem_needs"]
    nodes, per_node = layout(nd)
    common = dict(num_gpus_per_node=per_node, num_nodes=nodes)
    c = {"nd": nd, "num_nodes": nodes, "num_gpus_per_node": per_node}
    cpu, gpu = z2(total, cpu_offload=False, **common)
    c["zero2"] = {"gpu_bytes": gpu, "cpu_bytes": cpu}
    cpu, gpu = z2(total, cpu_offload=True, **common)
    c["zero2_offload_optimizer"] = {"gpu_bytes": gpu, "cpu_bytes": cpu}
    cpu, gpu, ll = z3(total, largest, cpu_offload=False, **common)
    c["zero3"] = {"gpu_bytes": gpu, "cpu_bytes": cpu, "largest_layer_bytes": ll}
    cpu, gpu, ll = z3(total, largest, cpu_offload=True, cpu_offload_params=False, **common)
    c["zero3_offload_optimizer"] = {"gpu_bytes": gpu, "cpu_bytes": cpu}
    cpu, gpu, ll = z3(total, largest, cpu_offload=True, cpu_offload_params=True, **common)
    c["zero3_offload_all"] = {"gpu_bytes": gpu, "cpu_bytes": cpu}
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepspeed-src", required=True, help="unpacked DeepSpeed source release")
    args = ap.parse_args()
    fns, digests = load_functions(args.deepspeed_src)
    cases = []
    for m in MODELS:
        total, largest = model_params(m["n_layer"], m["n_embd"])
        for nd in SETTINGS:
            cases.append({**m, "vocab_size": VOCAB, "seq_len": SEQ, "total_params": total,
                          "largest_layer_params": largest, **estimates(fns, total, largest, nd)})
    m = LLAMA
    total, largest = llama_params(m["n_layer"], m["n_embd"], m["n_head"], m["n_kv_head"],
                                  m["intermediate_size"], m["vocab_size"])
    for nd in LLAMA_SETTINGS:
        cases.append({**m, "total_params": total, "largest_layer_params": largest,
                      **estimates(fns, total, largest, nd)})
    out = {
        "source": "tools/gen_deepspeed_estimates.py",
        "deepspeed_version": version(args.deepspeed_src),
        "deepspeed_files_sha256": digests,
        "defaults": "additional_buffer_factor=1.5, zero_init=True (DeepSpeed's defaults)",
        "cases": cases,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
