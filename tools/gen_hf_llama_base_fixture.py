#!/usr/bin/env python3
"""Writes tests/fixtures/hf_llama_base/: the "downloaded" base model of the README's fine-tuning
example (examples/finetune_llama.sh, test cli.finetune_llama), as a model hub folder holds it.

No model hub is reachable here, so it is a small random LlamaForCausalLM saved by transformers
itself (GQA, untied head, llama3 RoPE scaling; bf16, as Llama checkpoints are published, which
keeps the file at about 200 KB), with the Llama-3-style tokenizer.json of tests/fixtures/tokenizer
(built with HF tokenizers by tools/gen_hf_pipelines_fixture.py; <|begin_of_text|> = 1203,
<|end_of_text|> = 1204). Committed so that the example's test starts no Python for it.

Not run in CI (it needs torch and transformers, tools/requirements-test.txt):

    .venv/bin/python tools/gen_hf_llama_base_fixture.py --out tests/fixtures/hf_llama_base
"""
import argparse
import os
import shutil

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/hf_llama_base")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1207, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=1203, eos_token_id=1204,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 32})
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    shutil.rmtree(a.out, ignore_errors=True)
    model.save_pretrained(a.out, safe_serialization=True)
    if os.path.exists(os.path.join(a.out, "generation_config.json")):
        os.remove(os.path.join(a.out, "generation_config.json"))
    shutil.copy(os.path.join(here, "..", "tests", "fixtures", "tokenizer", "llama3_style.json"),
                os.path.join(a.out, "tokenizer.json"))
    for n in os.listdir(a.out):
        os.chmod(os.path.join(a.out, n), 0o644)
    print(sorted(os.listdir(a.out)), os.path.getsize(os.path.join(a.out, "model.safetensors")))


if __name__ == "__main__":
    main()
