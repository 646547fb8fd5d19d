"""Writes tests/fixtures/tokenizer/{llama3_style,qwen2_style,pipelines_reference}.json: the
reference for tide's encoding with Llama-3-style and Qwen2-style HF tokenizer.json files.

No model hub is reachable from CI or the development machines, so the two tokenizer.json files
are built here with HF `tokenizers`, trained on a small corpus, with the pipeline of the real
files (meta-llama/Meta-Llama-3-8B and Qwen/Qwen2-7B tokenizer.json):

- llama3_style.json: normalizer null; pre_tokenizer Sequence[Split(LLAMA3_PATTERN, Isolated),
  ByteLevel(add_prefix_space=False, use_regex=False)]; model BPE with ignore_merges=True, plus a
  few whole-word vocabulary entries no merge produces (so ignore_merges changes ids, as it does in
  Llama 3's tiktoken-derived vocabulary); added special tokens <|begin_of_text|>,
  <|end_of_text|>, <|reserved_special_token_0|>, <|eot_id|> after the vocabulary; post_processor
  Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)].
- qwen2_style.json: normalizer NFC; pre_tokenizer Sequence[Split(QWEN2_PATTERN, Isolated),
  ByteLevel(use_regex=False)]; model BPE; added tokens <|endoftext|>, <|im_start|>, <|im_end|>
  (special) and <tool_call>, </tool_call> (not special: HF always matches those); post_processor
  ByteLevel.
- pipelines_reference.json: for each tokenizer and each line of mixed-language text (curly quotes,
  emoji, CJK, digits, whitespace runs, decomposed accents, special tokens in the text):
    "pieces":     HF's pre-tokenizer pieces (after the normalizer), as text;
    "ids":        encode(text, add_special_tokens=False) with encode_special_tokens=True
                  (special tokens in the text stay text: tide's encode());
    "ids_special": the same with encode_special_tokens=False (HF's default: special tokens in the
                  text become their ids; tide's encode(text, SpecialTokens::kMatch));
    "ids_template": encode(text) with the post-processor's tokens (HF's tokenizer(text)).

tests/unit/data/test_tokenizer_pipelines.cpp loads both files into tide and requires every list
to be equal, token for token.

Run (tokenizers and regex as pinned in tools/requirements-test.txt's environment):
    python3 tools/gen_hf_pipelines_fixture.py
"""

import json
import pathlib
import sys

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gen_tokenizer_fixture import LINES, TRAIN_TEXT, byte_decoder  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
VOCAB_SIZE = 1200

# The pre-tokenizer patterns of the real files, as they appear there.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN2_ADDED = ["<tool_call>", "</tool_call>"]  # special: false in Qwen2.5's file
# Whole pieces added to Llama 3's vocabulary without a merge that makes them: with
# ignore_merges HF emits them as one token, BPE would split them.
LLAMA3_WHOLE = [" Stra\u00dfe", "\u201eAnf\u00fchrungszeichen", "456"]

# Lines beyond gen_tokenizer_fixture's: what the two patterns, NFC and added tokens change.
EXTRA_LINES = [
    "HE'S, SHE'LL, WE'VE, I'M, THEY'D, YOU'RE, IT'S, It'S — and don\u2019t, DON\u2019T",
    "Digits 1234567 and 12,345.6789 and 1 22 333 4444; \u0663\u0664\u0665\u0666\u0667 "
    "\u00b9\u00b2\u00b3\u2074 \u2160\u2161\u2162 \uff11\uff12\uff13\uff14",
    "x1234y 2024-05-20T10:30:00Z v1.2.3 0x1F600",
    "decomposed cafe\u0301 A\u030angstro\u0308m, \u212b sign, \u1e9b\u0323 and \ufb01 ligature",
    "Hangul jamo \u1100\u1161\u11a8 and composed \uac01; kana \u304b\u3099 vs \u304c",
    "tabs\t\t\n  \r\n\r\n   x  \n\n\n  y\t \u3000\u00a0\n",
    "   ?!\n\n  ...  \u201cquoted\u201d\r\n",
    "<|begin_of_text|>Hello<|end_of_text|> <|eot_id|>x<|endoftext|>y",
    "<|im_start|>user\nHi there \U0001F44B<|im_end|>\n<|im_start|>assistant\n\u4f60\u597d<|im_end|>",
    "<tool_call>{\"name\": \"f\", \"x\": 12}</tool_call> after",
    "<|end_of_text|><|end_of_text|><|endoftext|><|endoftext|> twice",
    "partial <|endoftext and <|im_start and <tool_call and <|end_of_text",
    "<|reserved_special_token_0|>\u00e9<|reserved_special_token_0|>",
    "\u201cAnf\u00fchrungszeichen\u201d, 12345 and 123456, Stra\u00dfe, Stra\u00dfen",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family, \U0001F1EB\U0001F1F7 flag, "
    "\u2764\ufe0f\u200d\U0001F525 and \U0001F9D1\U0001F3FD\u200d\U0001F4BB",
]


def bpe_trainer(specials=()):
    return trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(specials),
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                               show_progress=False)


def split_byte_level(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def to_byte_unicode(text):
    table = {b: c for c, b in byte_decoder().items()}
    return "".join(table[b] for b in text.encode("utf-8"))


def llama3_style():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = split_byte_level(LLAMA3_PATTERN)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TRAIN_TEXT * 3, bpe_trainer())
    # Whole-word vocabulary entries with no merge, appended to the model's vocabulary.
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for word in LLAMA3_WHOLE:
        key = to_byte_unicode(word)
        assert key not in vocab, word
        vocab[key] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(j))
    # Special tokens after the vocabulary, as Llama 3's 128000..128255.
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA3_SPECIALS])
    bos = LLAMA3_SPECIALS[0]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                      special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    return tok


def qwen2_style():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = split_byte_level(QWEN2_PATTERN)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TRAIN_TEXT * 3, bpe_trainer())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN2_SPECIALS])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in QWEN2_ADDED])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def reference(tok, lines):
    u2b = byte_decoder()
    plain = Tokenizer.from_str(tok.to_str())
    plain.encode_special_tokens = True
    special = Tokenizer.from_str(tok.to_str())
    special.encode_special_tokens = False
    out = []
    for text in lines:
        normalized = tok.normalizer.normalize_str(text) if tok.normalizer else text
        pieces = [bytes(u2b[c] for c in p).decode("utf-8")
                  for p, _ in tok.pre_tokenizer.pre_tokenize_str(normalized)]
        assert "".join(pieces) == normalized, text
        ids = plain.encode(text, add_special_tokens=False).ids
        assert plain.decode(ids, skip_special_tokens=False) == normalized, text
        out.append({"text": text, "pieces": pieces, "ids": ids,
                    "ids_special": special.encode(text, add_special_tokens=False).ids,
                    "ids_template": special.encode(text).ids})
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    lines = LINES + EXTRA_LINES
    ref = {"generator": "tools/gen_hf_pipelines_fixture.py",
           "tokenizers_version": tokenizers.__version__, "tokenizers": {}}
    for name, build, eot in [("llama3_style", llama3_style, "<|end_of_text|>"),
                             ("qwen2_style", qwen2_style, "<|endoftext|>")]:
        tok = build()
        tok.save(str(OUT / f"{name}.json"))
        entries = reference(tok, lines)
        ref["tokenizers"][name] = {
            "file": f"{name}.json", "vocab_size": tok.get_vocab_size(),
            "eot_id": tok.token_to_id(eot), "lines": entries,
        }
        print(f"{name}: vocab {tok.get_vocab_size()}, {len(entries)} lines, "
              f"{sum(len(e['ids']) for e in entries)} tokens")
    # ignore_merges must matter for the Llama-3-style file: without it, other ids.
    llama = json.loads((OUT / "llama3_style.json").read_text(encoding="utf-8"))
    llama["model"]["ignore_merges"] = False
    merged = Tokenizer.from_str(json.dumps(llama))
    merged.encode_special_tokens = True
    changed = sum(merged.encode(e["text"], add_special_tokens=False).ids != e["ids"]
                  for e in ref["tokenizers"]["llama3_style"]["lines"])
    assert changed > 0, "ignore_merges changes no line"
    with open(OUT / "pipelines_reference.json", "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}/pipelines_reference.json ({changed} lines differ without ignore_merges)")


if __name__ == "__main__":
    sys.exit(main())
