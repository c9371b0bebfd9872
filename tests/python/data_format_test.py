"""Training reads every data format as the same token stream: a Megatron indexed dataset written here by
an independent writer (from docs/data-format.md) and an llm.c token file train to losses identical to
the flat file of the same tokens, with shuffle off and on; text tokenized by `tessera data prepare
--tokenizer` trains end to end; a flat uint16 file under a vocabulary above 65536 is refused."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
STEPS = 4


def write_megatron(prefix, docs, dtype=np.uint16):
    """MMIDIDX: magic, version 1, dtype code, counts, lengths (int32), byte pointers (int64), document
    indices (int64, from 0); the .bin holds the documents' ids back to back."""
    code = {np.uint16: 8, np.int32: 4}[dtype]
    item = np.dtype(dtype).itemsize
    lengths = np.array([len(d) for d in docs], np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * item)]).astype(np.int64)
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(lengths.astype("<i4").tobytes() + pointers.astype("<i8").tobytes())
        f.write(np.arange(len(docs) + 1, dtype="<i8").tobytes())


def write_llmc(path, tokens):
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, "<u2").tobytes())


class DataFormatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        rng = np.random.default_rng(3)
        tokens = (np.tile(np.arange(0, 256, 7), 120) ^ rng.integers(0, 4, 120 * 37)) % 256
        cls.flat = os.path.join(cls.tmp, "flat.bin")
        tokens.astype("<u2").tofile(cls.flat)
        # Documents of random lengths (some empty) whose concatenation is the flat file.
        cuts = np.sort(rng.choice(np.arange(1, tokens.size), 300, replace=False))
        docs = np.split(tokens, cuts)
        docs.insert(5, np.array([], np.int64))
        cls.megatron = os.path.join(cls.tmp, "meg")
        write_megatron(cls.megatron, docs)
        cls.llmc = os.path.join(cls.tmp, "tokens_llmc.bin")
        write_llmc(cls.llmc, tokens)

    def run_tessera(self, name, data, model="{family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 256, seq_len: 16}",
                    expect_ok=True):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {model}
data: {data}
train: {{steps: {STEPS}, micro_batch: 2, global_batch: 4, lr: 0.01, warmup_steps: 0, schedule: constant}}
output_dir: {self.tmp}/{name}
""")
        done = subprocess.run([TESSERA, "run", spec, "--quiet", "--threads-per-rank=1"],
                              env=dict(os.environ, TESSERA_RANK_BINARY=RANK), capture_output=True, text=True)
        if not expect_ok:
            self.assertNotEqual(done.returncode, 0, done.stdout)
            return done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            return [json.loads(line)["loss"] for line in f]

    def test_megatron_and_llmc_train_like_the_flat_file(self):
        for shuffle in ("false", "true"):
            flat = self.run_tessera(f"flat_{shuffle}", f"{{path: {self.flat}, shuffle: {shuffle}}}")
            self.assertEqual(len(flat), STEPS)
            for name, path, fmt in (("meg", self.megatron, "auto"), ("megbin", self.megatron + ".bin", "megatron"),
                                    ("llmc", self.llmc, "auto")):
                got = self.run_tessera(f"{name}_{shuffle}", f"{{path: {path}, format: {fmt}, shuffle: {shuffle}}}")
                self.assertEqual(got, flat, f"{name} shuffle={shuffle}: bit-identical losses")
            print(f"shuffle {shuffle}: flat, megatron and llm.c losses identical: {flat}")

    def test_tokenized_text_trains_end_to_end(self):
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        text = [f"document {i}: the quick brown fox jumps over {i * 7 % 13} lazy dogs." for i in range(400)]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                         show_progress=False))
        tj = os.path.join(self.tmp, "tok.json")
        tok.save(tj)
        jsonl = os.path.join(self.tmp, "text.jsonl")
        with open(jsonl, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in text)
        prefix = os.path.join(self.tmp, "text")
        done = subprocess.run([TESSERA, "data", "prepare", "--tokenizer", tj, jsonl, prefix, "--append-eos"],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("400 documents", done.stdout)
        vocab = tok.get_vocab_size()
        losses = self.run_tessera("text", f"{{path: {prefix}}}",
                                  model=f"{{family: llama, layers: 2, hidden: 32, heads: 2, vocab: {vocab}, seq_len: 16}}")
        self.assertEqual(len(losses), STEPS)
        self.assertLess(abs(losses[0] - np.log(vocab)), 0.5, "an untrained model's loss is near log(vocab)")

    def test_flat_uint16_under_a_large_vocabulary_is_refused(self):
        err = self.run_tessera("big", f"{{path: {self.flat}}}",
                               model="{family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 70000, seq_len: 16}",
                               expect_ok=False)
        self.assertIn("a flat file of uint16 cannot hold the token ids of model.vocab 70000", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
