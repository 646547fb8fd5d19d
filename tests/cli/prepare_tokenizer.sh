#!/usr/bin/env bash
# `tide prepare --tokenizer` with Llama-3-style and Qwen2-style tokenizer.json files (built with
# HF `tokenizers` by tools/gen_hf_pipelines_fixture.py): the shards hold each document framed as
# the file says (Llama 3: <|begin_of_text|> ... <|end_of_text|>; Qwen2: <|endoftext|> first), and
# tokenizer.json files tide cannot reproduce exactly are refused with one line saying what to fix.
set -uo pipefail
tide=$1 fixtures=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
fail=0
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"

for i in $(seq 1 20); do
  printf '\xe2\x80\x9cDoc %d\xe2\x80\x9d: 12345 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac  \xf0\x9f\x98\x80\n%%\n' "$i"
done > docs.txt
# token i of a shard (uint16 after the 1024-byte header)
token() { od -An -tu2 -j $((1024 + 2 * $2)) -N2 "$1" | tr -d ' '; }
check() {  # check WHAT GOT WANT
  if [ "$2" != "$3" ]; then echo "FAILED: $1: got '$2', want '$3'"; fail=1; else echo "ok: $1 = $3"; fi
}
for name in llama3_style qwen2_style; do
  if ! "$tide" prepare --input docs.txt --out-dir "$name" --doc-separator % \
       --tokenizer "$fixtures/$name.json" > "$name.log" 2>&1; then
    echo "FAILED: tide prepare --tokenizer $name.json:"; cat "$name.log"; fail=1; continue
  fi
  check "$name tokenizer.json kept as it was" "$(cmp -s "$fixtures/$name.json" "$name/tokenizer.json" && echo same)" same
done
# Llama 3 style: 1203 <|begin_of_text|>, 1204 <|end_of_text|>; Qwen2 style: 1200 <|endoftext|>.
check "llama3_style eot_id" "$(grep -o '"eot_id": *[0-9]*' llama3_style/meta.json | grep -o '[0-9]*$')" 1204
check "llama3_style first token" "$(token llama3_style/train.bin 0)" 1203
check "qwen2_style eot_id" "$(grep -o '"eot_id": *[0-9]*' qwen2_style/meta.json | grep -o '[0-9]*$')" 1200
check "qwen2_style first token" "$(token qwen2_style/train.bin 0)" 1200

# What tide cannot do exactly is one clear error.
edit() {  # edit SED-EXPRESSION OUT: the Qwen2-style file, edited
  sed "$1" "$fixtures/qwen2_style.json" > "$2"
}
edit 's/"type": "BPE"/"type": "WordPiece"/' wordpiece.json
expect_error "wordpiece.json: \"model\" is of type WordPiece; tide reads byte-level BPE tokenizers only" \
  prepare --input docs.txt --out-dir bad --tokenizer wordpiece.json
edit 's/"Regex": "(?i:/"String": "(?i:/' string.json
expect_error "string.json: the Split pre-tokenizer's \"pattern\" is .*; tide runs a regex" \
  prepare --input docs.txt --out-dir bad --tokenizer string.json
edit 's/"Regex": "(?i:/"Regex": "(?<x:/' regex.json
expect_error "regex.json: the Split pre-tokenizer: pre-tokenizer regex /(?<x:.* does not compile" \
  prepare --input docs.txt --out-dir bad --tokenizer regex.json
edit 's/"type": "NFC"/"type": "NFKC"/' nfkc.json
expect_error "nfkc.json: \"normalizer\" is {\"type\":\"NFKC\"}; tide applies none (GPT-2, Llama 3) or NFC" \
  prepare --input docs.txt --out-dir bad --tokenizer nfkc.json
exit $fail
