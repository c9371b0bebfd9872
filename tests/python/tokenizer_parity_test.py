"""tessera's C++ tokenizer against the `tokenizers` library itself: byte-level BPE tokenizers trained
here (GPT-2's ByteLevel pre-tokenizer; a Llama-3 style Split regex with ignore_merges; Qwen2's NFC
normalizer and Split regex with added tokens matched before and after normalization), more than 1 MB of
mixed documents encoded by `tessera data prepare --tokenizer`, the .bin/.idx read back by a reader
written here from docs/data-format.md, every id compared with `encode_batch`. Also: every code point
of planes 0-3 in context (the two regex engines' Unicode tables), random valid UTF-8, text built for
NFC's cases (marks of every class, jamo, exclusions, singletons), EOS discovery,
and bad inputs (invalid UTF-8, bad JSON lines) refused by name with no half dataset left behind."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_reference import read_indexed_dataset  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")  # Qwen2: one digit per piece, after NFC.
KINDS = ("gpt", "llama", "qwen")

WORDS = {
    "latin": "the quick brown fox jumps over lazy dogs while naïve café owners façade résumé Ærø Øresund straße".split(),
    "cyrillic": "съешь же ещё этих мягких французских булок да выпей чаю Ёлка".split(),
    "greek": "ξεσκεπάζω την ψυχοφθόρα βδελυγμία Ωμέγα ΣΊΣΥΦΟΣ".split(),
    "arabic": "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر".split(),
    "hebrew": "דג סקרן שט בים מאוכזב ולפתע מצא חברה".split(),
    "devanagari": "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले".split(),
    "cjk": "我能吞下玻璃而不伤身体 いろはにほへと ちりぬるを 色は匂へど 散りぬるを".split(),
    "hangul": "다람쥐 헌 쳇바퀴에 타고파 키스의 고유조건은".split(),
    "thai": "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน".split(),
    "emoji": ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🤖", "✨", "❤️", "🧑🏿‍💻"],
    "digits": ["0", "42", "1234567", "3.14159", "1,000,000", "٣٤٥", "१२३", "Ⅻ", "½", "²", "𝟘𝟙"],
    "marks": ["'s", "'LL", "'Re", "'VE", "'d", "'M", "'T", "ſ'ſ", "--", "...", "!?", "#$%", "(x)", "<b>", "{}"],
}
SPACES = [" ", "  ", "   \t", "\n", "\r\n", "\n\n\n", "\t", "\u00a0", "\u3000", "\u2028", "\u0085", " \r\n  ", "\u2009"]


def mixed_documents(n_bytes, seed):
    """Seeded documents mixing scripts, emoji, digits and whitespace runs; some empty."""
    rng = random.Random(seed)
    docs, total = [], 0
    kinds = list(WORDS)
    while total < n_bytes:
        if rng.random() < 0.03:
            docs.append("")
            continue
        parts = []
        for _ in range(rng.randint(1, 200)):
            kind = rng.choice(kinds) if rng.random() < 0.5 else "latin"
            word = rng.choice(WORDS[kind])
            if rng.random() < 0.1:
                word = word.upper() if rng.random() < 0.5 else word.capitalize()
            parts.append(word)
            parts.append(rng.choice(SPACES) if rng.random() < 0.3 else " ")
        doc = "".join(parts)
        docs.append(doc)
        total += len(doc.encode())
    return docs


def code_point_documents():
    """Every code point of planes 0-3 (assigned or not, surrogates excepted) in contexts that the
    pre-tokenizers' classes decide: after a letter, doubled, after a space, after an apostrophe."""
    docs, doc = [], []
    for cp in range(1, 0x40000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        doc.append(f"x{c}{c} '{c}1{c}\n")
        if len(doc) == 512:
            docs.append("".join(doc))
            doc = []
    docs.append("".join(doc))
    return docs


def random_utf8_documents(count, seed):
    rng = random.Random(seed)
    def char():
        r = rng.random()
        cp = rng.randint(0, 0x7F) if r < 0.5 else rng.randint(0x80, 0xFFFF) if r < 0.9 else rng.randint(0x10000, 0x10FFFF)
        return chr(0xFFFD) if 0xD800 <= cp <= 0xDFFF else chr(cp)
    return ["".join(char() for _ in range(rng.randint(0, 300))) for _ in range(count)]


def nfc_documents(count, seed):
    """Text where NFC has work to do: marks of many combining classes, precomposed, decomposable,
    excluded and singleton characters, Hangul jamo and syllables, between letters and spaces."""
    rng = random.Random(seed)
    pool = ([chr(c) for c in range(0x300, 0x370)] + [chr(c) for c in range(0x591, 0x5C8)] +
            [chr(c) for c in range(0x1DC0, 0x1E00)] + [chr(c) for c in range(0xC0, 0x180)] +
            [chr(c) for c in range(0x1E00, 0x1F00, 3)] + [chr(c) for c in range(0x1100, 0x1200, 2)] +
            [chr(c) for c in range(0xAC00, 0xAD00, 5)] + list("\u212b\u2126\u0958\u0344\u0f73\u0bca\u0bc6\u0bbe"
                                                             "\U00011938\u0cd5\u0e48\u302a\u3099\uff9e") +
            list("aeiouAEIOUnN ") * 8)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 60))) for _ in range(count)]


def train(kind, corpus, tmp):
    if kind == "gpt":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        special = ["<|endoftext|>"]
    elif kind == "llama":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special = ["<|begin_of_text|>", "<|end_of_text|>"]
    else:
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    if kind == "llama":
        tok.add_tokens(["<tool>", "naïve café"])  # Non-special added tokens: matched in text.
    if kind == "qwen":
        # Matched after NFC (ñ also from n + U+0303), and in the text as given (Å, not U+212B).
        tok.add_tokens([AddedToken("\u00f1", normalized=True), AddedToken("\u00c5", normalized=False)])
    d = os.path.join(tmp, kind)
    os.makedirs(d)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    if kind == "llama":
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": "<|end_of_text|>", "bos_token": "<|begin_of_text|>"}, f)
    tok.encode_special_tokens = True  # tessera never makes special tokens from text.
    return tok, path


class TokenizerParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.docs = mixed_documents(1_100_000, seed=5)
        cls.docs += ["<|endoftext|> is text here <|end_of_text|>", "a <tool> call naïve café", "<tool><tool>"]
        cls.tokenizers = {k: train(k, cls.docs[::3] + nfc_documents(300, 11), cls.tmp) for k in KINDS}

    def prepare(self, kind, inputs, name, *flags, expect_ok=True):
        out = os.path.join(self.tmp, name)
        done = subprocess.run([TESSERA, "data", "prepare", "--tokenizer", self.tokenizers[kind][1], *inputs, out,
                               "--no-progress", *flags], capture_output=True, text=True)
        if not expect_ok:
            self.assertNotEqual(done.returncode, 0, done.stdout)
            leftovers = [f for f in os.listdir(self.tmp) if f.startswith(name)]
            self.assertEqual(leftovers, [], "no half dataset")
            return done.stderr
        self.assertEqual(done.returncode, 0, done.stderr)
        return read_indexed_dataset(out)

    def write_jsonl(self, name, docs):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        return path

    def assert_same_ids(self, kind, docs, got, what):
        want = [e.ids for e in self.tokenizers[kind][0].encode_batch(docs, add_special_tokens=False)]
        self.assertEqual(len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(g, w, f"{kind} {what} document {i}: {docs[i][:80]!r}")
        print(f"{kind} {what}: {len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes, "
              f"{sum(map(len, want))} tokens: identical")

    def test_mixed_corpus_ids_equal_tokenizers(self):
        self.assertGreater(sum(len(d.encode()) for d in self.docs), 1_000_000)
        jsonl = self.write_jsonl("mixed.jsonl", self.docs[:-50])
        txt = os.path.join(self.tmp, "last.txt")  # A .txt input is one document.
        with open(txt, "w", encoding="utf-8", newline="") as f:
            f.write("\r\n".join(self.docs[-50:]))
        docs = self.docs[:-50] + ["\r\n".join(self.docs[-50:])]
        for kind in KINDS:
            code, got = self.prepare(kind, [jsonl, txt], f"mixed_{kind}", "--threads", "2")
            self.assertEqual(code, 8, "uint16 for a vocabulary of 3000")
            self.assert_same_ids(kind, docs, got, "mixed corpus")

    def test_every_code_point_in_context(self):
        docs = code_point_documents()
        jsonl = self.write_jsonl("codepoints.jsonl", docs)
        for kind in KINDS:
            _, got = self.prepare(kind, [jsonl], f"cp_{kind}", "--threads", "2")
            self.assert_same_ids(kind, docs, got, "code points U+0001..U+3FFFF")
            # The ids alone can hide a split in another place (characters without merges give the
            # same ids either way): the pre-tokenizer's pieces must be the library's too.
            done = subprocess.run([TESSERA, "data", "tokenize", "--tokenizer", self.tokenizers[kind][1], "--pieces",
                                   jsonl], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            pre = self.tokenizers[kind][0].pre_tokenizer
            for i, (line, doc) in enumerate(zip(done.stdout.splitlines(), docs)):
                self.assertEqual(json.loads(line), [p for p, _ in pre.pre_tokenize_str(doc)],
                                 f"{kind} pieces of code point document {i}")

    def test_random_valid_utf8(self):
        docs = random_utf8_documents(3000, seed=9)
        jsonl = self.write_jsonl("random.jsonl", docs)
        for kind in KINDS:
            _, got = self.prepare(kind, [jsonl], f"random_{kind}")
            self.assert_same_ids(kind, docs, got, "random UTF-8")

    def test_nfc_on_marks_jamo_and_composites(self):
        """Qwen2's NFC normalizer: random runs of combining marks of every class, decomposable and
        excluded characters, singletons and Hangul jamo (the composition algorithm's cases)."""
        docs = nfc_documents(4000, seed=12)
        jsonl = self.write_jsonl("nfc.jsonl", docs)
        _, got = self.prepare("qwen", [jsonl], "nfc_qwen", "--threads", "2")
        self.assert_same_ids("qwen", docs, got, "NFC stress")
        changed = sum(normalizers.NFC().normalize_str(d) != d for d in docs)
        self.assertGreater(changed, len(docs) // 2, "most documents change under NFC")

    def test_special_tokens_are_never_made_from_text(self):
        docs = ["<|endoftext|><|end_of_text|><|begin_of_text|>"]
        jsonl = self.write_jsonl("special.jsonl", docs)
        for kind in ("gpt", "llama"):
            _, got = self.prepare(kind, [jsonl], f"special_{kind}")
            self.assert_same_ids(kind, docs, got, "special token text")
            tok = self.tokenizers[kind][0]
            specials = {tok.token_to_id(t) for t in ("<|endoftext|>", "<|end_of_text|>", "<|begin_of_text|>")}
            self.assertFalse(specials & set(got[0]))

    def test_append_eos_finds_the_eos_token(self):
        docs = ["one document", "", "two"]
        jsonl = self.write_jsonl("eos.jsonl", docs)
        for kind, eos in (("llama", "<|end_of_text|>"), ("gpt", "<|endoftext|>")):
            # llama: tokenizer_config.json's eos_token; gpt: the one special token named like an EOS.
            _, got = self.prepare(kind, [jsonl], f"eos_{kind}", "--append-eos")
            eos_id = self.tokenizers[kind][0].token_to_id(eos)
            want = [e.ids + [eos_id] for e in self.tokenizers[kind][0].encode_batch(docs, add_special_tokens=False)]
            self.assertEqual(got, want)
        err = self.prepare("gpt", [jsonl], "eos_bad", "--append-eos", "--eos-token", "<|nope|>", expect_ok=False)
        self.assertIn("EOS token '<|nope|>' from --eos-token is not in the tokenizer", err)

    def test_int32_when_the_vocabulary_does_not_fit_uint16(self):
        with open(self.tokenizers["gpt"][1]) as f:
            j = json.load(f)
        j["model"]["vocab"]["<big>"] = 70000  # The library takes an added token's id from the vocabulary.
        j["added_tokens"].append({"id": 70000, "content": "<big>", "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": False})
        big = os.path.join(self.tmp, "big.json")
        with open(big, "w") as f:
            json.dump(j, f)
        docs = ["a <big> token", "plain"]
        out = os.path.join(self.tmp, "big_out")
        done = subprocess.run([TESSERA, "data", "prepare", "--tokenizer", big, self.write_jsonl("big.jsonl", docs), out,
                               "--no-progress"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        code, got = read_indexed_dataset(out)
        self.assertEqual(code, 4, "int32")
        ref = Tokenizer.from_file(big)
        ref.encode_special_tokens = True
        self.assertEqual(got, [e.ids for e in ref.encode_batch(docs, add_special_tokens=False)])
        self.assertIn(70000, got[0])

    def test_bad_inputs_are_named_and_leave_no_dataset(self):
        bad_txt = os.path.join(self.tmp, "bad.txt")
        with open(bad_txt, "wb") as f:
            f.write("héllo wörld ".encode() + b"\xff\xfe tail")
        err = self.prepare("gpt", [self.write_jsonl("ok.jsonl", ["fine"]), bad_txt], "bad1", expect_ok=False)
        self.assertIn("bad.txt: byte 14: invalid UTF-8", err)
        bad_jsonl = os.path.join(self.tmp, "bad.jsonl")
        with open(bad_jsonl, "w") as f:
            f.write('{"text": "ok"}\n\n{"text": 5}\n')
        err = self.prepare("gpt", [bad_jsonl], "bad2", expect_ok=False)
        self.assertIn('bad.jsonl:3: not a JSON object with a string field "text"', err)
        with open(bad_jsonl, "w") as f:
            f.write('{"text": "ok"}\n{"text": "unterminated\n')
        err = self.prepare("gpt", [bad_jsonl], "bad3", expect_ok=False)
        self.assertIn("bad.jsonl:2: not valid JSON", err)
        err = self.prepare("gpt", [os.path.join(self.tmp, "missing.jsonl")], "bad4", expect_ok=False)
        self.assertIn("missing.jsonl: cannot read", err)

    def test_tokenize_command_prints_the_ids(self):
        done = subprocess.run([TESSERA, "data", "tokenize", "--tokenizer", self.tokenizers["llama"][1],
                               "--text", "Hello wörld 12345", "--text", ""], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        tok = self.tokenizers["llama"][0]
        self.assertEqual([json.loads(l) for l in done.stdout.splitlines()],
                         [tok.encode("Hello wörld 12345", add_special_tokens=False).ids, []])


if __name__ == "__main__":
    unittest.main(verbosity=2)
