"""Writes tests/fixtures/tokenizer/: the reference for tide's GPT-2 tokenization, from independent
implementations.

- reference.json: for each line of multilingual text (curly quotes and apostrophes, « », ², emoji,
  CJK, Cyrillic, Greek, Devanagari, digits, whitespace runs, newlines, invalid-free UTF-8 only):
    "pieces": GPT-2's pre-tokenizer split, from Python's `regex` module running GPT-2's pattern
              (exactly what GPT-2's encoder.py does);
    "ids":    the token ids HF `tokenizers` gives with hf_bpe.json.
- hf_bpe.json: a byte-level BPE (GPT-2's pre-tokenizer, vocab VOCAB_SIZE) trained by HF
  `tokenizers` on TRAIN_TEXT (different text from the reference lines, so encoding them
  exercises partial merges) and saved by HF (merges as ["a", "b"] pairs, tokenizers >= 0.20).
- hf_bpe_split.json: the same model with the pre-tokenizer written the other way HF writes
  GPT-2's: Sequence[Split(GPT-2's regex, isolated), ByteLevel(use_regex=False)]. HF gives the
  same ids with it (checked here).

tests/unit/data/test_tokenizer_reference.cpp loads both HF files into tide and checks the splits,
the ids and the decoded bytes against reference.json, exactly.

The reverse direction (not in CI, which has no Python packages) is checked here when a built
tide is given (--tide):
  1. `tide prepare` trains a tokenizer (vocab 800) on the reference and training lines and
     writes tokenizer.json; HF loads that file, and for every document in train.bin HF's
     encoding of the decoded text equals tide's ids.
  2. `tide prepare --tokenizer hf_bpe.json` writes shards whose ids equal HF's encoding.
Last run (tokenizers 0.23.3, regex 2026.5.9): 1. 59 documents, 1933 tokens, all equal;
2. 1725 tokens, all equal.

<|endoftext|> in text: tide never turns it into the special id (only `tide prepare` inserts it
between documents); HF does unless `encode_special_tokens` is set, which the reference sets.

Run:
    pip install regex tokenizers
    python3 tools/gen_tokenizer_fixture.py [--tide build/tide]
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import regex
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
VOCAB_SIZE = 1200
EOT = "<|endoftext|>"

# The reference lines. Escapes mark characters that are invisible or easy to confuse.
LINES = [
    "I don\u2019t think it\u2019s \u201cfine\u201d \u2014 she said \u2018no\u2019.",
    "It's the fox's toy; they'll, we've, I'm, he'd, you're. IT'S DON'T Don'T",
    "It\u2019s, you\u2019re, we\u2019ll, they\u2019ve: curly apostrophes are not contractions.",
    "\u00ab\u00a0Bonjour, \u00e7a va\u202f?\u00a0\u00bb \u2014 \u00c9lodie r\u00e9pondit : \u00ab Tr\u00e8s bien ! \u00bb",
    "E = mc\u00b2 and x\u00b3 + \u00bd = 0.5; H\u2082O; \u2460 \u2461 \u216b; 10\u00b0C",
    "I \u2764\ufe0f emoji \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EF\U0001F1F5!",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u6f22\u5b57\u3068\u30ab\u30bf\u30ab\u30ca\u3002"
    "\u4e2d\u6587\uff1a\u4f60\u597d\uff0c\u4e16\u754c\uff01 \ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4.",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0421\u044a\u0435\u0448\u044c \u0436\u0435 "
    "\u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.",
    "\u039e\u03b5\u03c3\u03ba\u03b5\u03c0\u03ac\u03b6\u03c9 \u03c4\u03b7\u03bd \u03c8\u03c5\u03c7\u03bf"
    "\u03c6\u03b8\u03cc\u03c1\u03b1 \u03b2\u03b4\u03b5\u03bb\u03c5\u03b3\u03bc\u03af\u03b1. \u0391\u03bb\u03c6\u03b1 123",
    "Call 555-1234 or +1 (800) 123-4567; pi \u2248 3.14159, 1,000,000 and \u0663\u0664\u0665 and \u0967\u0968\u0969",
    "a  b   c\t\td  \n\n  e   ",
    "line one\nline two\r\n\r\nline three\n",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e (Devanagari marks are not letters)",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 and \u05e9\u05dc\u05d5\u05dd "
    "\u05e2\u05d5\u05dc\u05dd",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 co\u00f6perate, and decomposed cafe\u0301",
    "def f(x): return x**2  # \u201cquoted\u201d\n\tprint(f'{x!r}')\n",
    "https://example.com/a?b=c&d=e \u2014 mail me@example.org",
    "thin\u2009space, ideographic\u3000space, nbsp\u00a0here, em\u2003space, nel\u0085line",
    "\u201eAnf\u00fchrungszeichen\u201c und \u201aeinfache\u2018, \u2039single\u203a \u00abdouble\u00bb",
    "\u2200x \u2208 \u211d: x\u00b2 \u2265 0 \u21d2 \u221ax \u2208 \u211d\u207a",
    "Wait\u2026 what?! \u2014 yes \u2013 no \u2015 maybe...",
    "\u20ac100, \u00a35.50, \u00a51000, $3, \u20b920",
    "\tindented\n    four spaces\n",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "zero\u200bwidth\u200djoiner and soft\u00adhyphen",
    "12345678901234567890 digits, 007, 3rd, 1st, 2nd",
    "   \n\n\t \n",
    "the literal " + EOT + " stays text",
    "  leading and trailing spaces  ",
    "Mixed: Stra\u00dfe, \u0130stanbul, \u0131\u015f\u0131k, \u00c5ngstr\u00f6m, \ufb01ne \ufb02ow",
    "\u3053\u308c\u306f\u30c6\u30b9\u30c8\u3067\u3059\u3002 \u5b57\u5e55\uff08\u3058\u307e\u304f\uff09",
    "Tabs\tbetween\twords\tand\t\ttwo",
    "\x1c\x1d\x1e\x1f separators and \x7f delete",
]

# Training text for the HF tokenizer: the same kinds of text, other words.
TRAIN_TEXT = [
    "The committee didn\u2019t approve the budget; it\u2019ll meet again on Tuesday at 10:30.",
    "\u201cWe\u2019re not done yet,\u201d the chair said, \u201cbut we\u2019ve made progress.\u201d",
    "They're sure it's the team's best season: 12 wins, 3 losses, and 1 draw.",
    "\u00ab Les enfants jouent dans le jardin \u00bb, dit la grand-m\u00e8re. \u00c0 bient\u00f4t !",
    "Der B\u00e4cker backt Br\u00f6tchen f\u00fcr die Stra\u00dfe; \u00fcbermorgen gibt es Kuchen.",
    "\u041c\u043e\u0441\u043a\u0432\u0430 \u2014 \u0441\u0442\u043e\u043b\u0438\u0446\u0430 "
    "\u0420\u043e\u0441\u0441\u0438\u0438, \u0430 \u041a\u0438\u0435\u0432 \u2014 "
    "\u0441\u0442\u043e\u043b\u0438\u0446\u0430 \u0423\u043a\u0440\u0430\u0438\u043d\u044b.",
    "\u0397 \u0391\u03b8\u03ae\u03bd\u03b1 \u03b5\u03af\u03bd\u03b1\u03b9 \u03b7 \u03c0\u03c1\u03c9"
    "\u03c4\u03b5\u03cd\u03bf\u03c5\u03c3\u03b1 \u03c4\u03b7\u03c2 \u0395\u03bb\u03bb\u03ac\u03b4\u03b1\u03c2.",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u5317\u4eac\u662f\u4e2d\u56fd"
    "\u7684\u9996\u90fd\u3002\uc11c\uc6b8\uc740 \ud55c\uad6d\uc758 \uc218\ub3c4\uc785\ub2c8\ub2e4.",
    "Area = \u03c0r\u00b2; volume = \u2074\u2044\u2083\u03c0r\u00b3; \u00bc + \u00be = 1.",
    "Party time \U0001F389\U0001F389 and coffee \u2615 with friends \U0001F46B \U0001F44B\U0001F3FB",
    "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n",
    "Prices: \u20ac9.99, $19.99, \u00a312.50 \u2014 shipping \u2248 2\u20133 days.",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0914\u0930 "
    "\u0938\u0902\u0938\u094d\u0915\u0943\u0924",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629",
    "Numbers 2024, 1999, 3.14, 2.718, 42, 1000000 and phone +44 20 7946 0958.",
    "    indented code\n\tand a tab\n\n\nthree newlines\r\nand CRLF",
    "Once upon a time, a curious fox wandered through the silent forest, looking for berries.",
    "She\u2019d never seen the ocean before; the waves were louder than she\u2019d imagined.",
    "Scientists measured 6.02\u00d710\u00b2\u00b3 molecules, a result they couldn\u2019t explain at first.",
    "Il pleuvait depuis trois jours, et la rivi\u00e8re d\u00e9bordait sur les champs voisins.",
    "El ni\u00f1o corri\u00f3 hacia la playa: \u00a1qu\u00e9 alegr\u00eda ver el mar otra vez!",
    "\u0412\u0435\u0447\u0435\u0440\u043e\u043c \u043c\u044b \u0447\u0438\u0442\u0430\u043b\u0438 "
    "\u043a\u043d\u0438\u0433\u0438 \u0438 \u043f\u0438\u043b\u0438 \u0433\u043e\u0440\u044f\u0447\u0438\u0439 "
    "\u0447\u0430\u0439 \u0441 \u043b\u0438\u043c\u043e\u043d\u043e\u043c.",
    "\u6625\u306b\u306a\u308b\u3068\u3001\u685c\u306e\u82b1\u304c\u54b2\u304d\u307e\u3059\u3002"
    "\u6211\u4eec\u660e\u5929\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "\u03a4\u03bf \u03c0\u03c1\u03c9\u03af \u03c0\u03af\u03bd\u03bf\u03c5\u03bc\u03b5 "
    "\u03ba\u03b1\u03c6\u03ad \u03ba\u03b1\u03b9 \u03b4\u03b9\u03b1\u03b2\u03ac\u03b6\u03bf\u03c5\u03bc\u03b5 "
    "\u03b5\u03c6\u03b7\u03bc\u03b5\u03c1\u03af\u03b4\u03b5\u03c2.",
    "import numpy as np\nx = np.linspace(0, 1, 101)\nprint(x.mean(), x.std())\n",
    "Weather today: sunny \u2600\ufe0f, 24\u00b0C, wind 12 km/h \u2014 tomorrow rain \U0001F327\ufe0f.",
    "The train leaves at 07:45 from platform 9\u00be; tickets cost \u20ac23.40 each.",
    "Quick reminders:\n  - buy milk\n  - call mom\n  - finish the report by Friday\n",
    "They\u2019ve said \u00abmaybe\u00bb twice; we\u2019d rather hear \u201cyes\u201d or \u201cno\u201d.",
    "\ud55c\uad6d\uc758 \uac00\uc744\uc740 \ub2e8\ud48d\uc774 \uc544\ub984\ub2f5\uc2b5\ub2c8\ub2e4.",
]


def byte_decoder():
    """GPT-2's unicode -> byte table (encoder.py's bytes_to_unicode, inverted)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def train_hf():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT * 3, trainer)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tide", help="a built tide binary: also check that HF loads what tide writes")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    pattern = regex.compile(GPT2_PATTERN)
    u2b = byte_decoder()

    tok = train_hf()
    tok.encode_special_tokens = True  # "<|endoftext|>" in text is text, as in tide
    tok.save(str(OUT / "hf_bpe.json"))
    # The Split + ByteLevel form of the same pre-tokenizer.
    split = Tokenizer.from_file(str(OUT / "hf_bpe.json"))
    split.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    split.encode_special_tokens = True
    split.save(str(OUT / "hf_bpe_split.json"))

    lines = []
    for text in LINES:
        pieces = pattern.findall(text)
        assert "".join(pieces) == text
        # HF's own pre-tokenizer must split the same way (byte-unicode pieces back to text).
        hf_pieces = [bytes(u2b[c] for c in p).decode("utf-8")
                     for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
        assert hf_pieces == pieces, (text, pieces, hf_pieces)
        ids = tok.encode(text, add_special_tokens=False).ids
        assert split.encode(text, add_special_tokens=False).ids == ids, text
        assert tok.decode(ids, skip_special_tokens=False) == text, text
        lines.append({"text": text, "pieces": pieces, "ids": ids})
    ref = {
        "generator": "tools/gen_tokenizer_fixture.py",
        "regex_version": regex.__version__,
        "tokenizers_version": tokenizers.__version__,
        "pattern": GPT2_PATTERN,
        "vocab_size": tok.get_vocab_size(),
        "eot_id": tok.token_to_id(EOT),
        "lines": lines,
    }
    with open(OUT / "reference.json", "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(lines)} lines, vocab {tok.get_vocab_size()}, "
          f"{sum(len(l['ids']) for l in lines)} tokens")

    if args.tide:
        check_tide_to_hf(args.tide)


def check_tide_to_hf(tide):
    """tide prepare's tokenizer.json loads in HF and gives tide's ids on every document."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # One document per reference line; "%" lines separate them.
        (tmp / "in.txt").write_text("".join(t + "\n%\n" for t in LINES + TRAIN_TEXT),
                                    encoding="utf-8")
        subprocess.run([tide, "prepare", "--input", str(tmp / "in.txt"), "--out-dir",
                        str(tmp / "out"), "--vocab-size", "800", "--doc-separator", "%"],
                       check=True, stdout=subprocess.DEVNULL)
        meta = json.loads((tmp / "out" / "meta.json").read_text())
        hf = Tokenizer.from_file(str(tmp / "out" / "tokenizer.json"))
        hf.encode_special_tokens = True
        assert hf.get_vocab_size() == meta["vocab_size"], (hf.get_vocab_size(), meta)
        assert hf.token_to_id(EOT) == meta["eot_id"]
        data = (tmp / "out" / "train.bin").read_bytes()
        ids = [int.from_bytes(data[i:i + 2], "little") for i in range(1024, len(data), 2)]
        docs = docs_of(ids, meta["eot_id"])
        source = "".join(LINES + TRAIN_TEXT)
        for d in docs:
            text = hf.decode(d, skip_special_tokens=False)
            assert text.strip() and text.strip() in source, text
            got = hf.encode(text, add_special_tokens=False).ids
            assert got == d, (text, got, d)
        print(f"tide -> HF: {len(docs)} documents, {len(ids)} tokens: HF's ids equal tide's "
              f"(vocab {meta['vocab_size']})")
        # HF -> tide -> HF: tide prepare with HF's file writes shards with HF's ids.
        subprocess.run([tide, "prepare", "--input", str(tmp / "in.txt"), "--out-dir",
                        str(tmp / "out_hf"), "--tokenizer", str(OUT / "hf_bpe.json"),
                        "--doc-separator", "%"], check=True, stdout=subprocess.DEVNULL)
        hf = Tokenizer.from_file(str(OUT / "hf_bpe.json"))
        hf.encode_special_tokens = True
        data = (tmp / "out_hf" / "train.bin").read_bytes()
        got = [int.from_bytes(data[i:i + 2], "little") for i in range(1024, len(data), 2)]
        eot = hf.token_to_id(EOT)
        want = []
        for d in docs_of(got, eot):
            text = hf.decode(d, skip_special_tokens=False)
            want += [eot] + hf.encode(text, add_special_tokens=False).ids
        assert got == want
        print(f"HF file -> tide prepare --tokenizer: {len(got)} tokens, equal to HF's ids")


def docs_of(ids, eot):
    docs = []
    for i in ids:  # every document starts with <|endoftext|>
        if i == eot:
            docs.append([])
        else:
            docs[-1].append(i)
    return docs


if __name__ == "__main__":
    sys.exit(main())
