"""Training reads every data format as the same token stream: a Megatron indexed dataset written here by
an independent writer (from docs/data-format.md) and an llm.c token file train to losses identical to
the flat file of the same tokens, with shuffle off and on; text tokenized by `tessera data prepare
--tokenizer` trains end to end; a flat uint16 file under a vocabulary above 65536 is refused.
Blends: the samples of a 2-source blend equal its documented definition (computed here); a blend job
stopped at step 3 with dp=2 and resumed with dp=1 or dp=4 reads the same samples and reaches the
losses of the uninterrupted run."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_reference import blend_reference, write_llmc, write_megatron  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
STEPS = 4


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
        cls.other = os.path.join(cls.tmp, "other.bin")  # A second source for blends: 185 windows of 16.
        (np.arange(185 * 16 + 1) * 3 % 251).astype("<u2").tofile(cls.other)

    def write_spec(self, name, data, model, steps=STEPS, batch="micro_batch: 2, global_batch: 4", extra=""):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {model}
data: {data}
train: {{steps: {steps}, {batch}, lr: 0.01, warmup_steps: 0, schedule: constant}}
output_dir: {self.tmp}/{name}
{extra}""")
        return spec

    def run_tessera(self, name, data, model="{family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 256, seq_len: 16}",
                    expect_ok=True, spec=None, sets=()):
        spec = spec or self.write_spec(name, data, model)
        cmd = [TESSERA, "run", spec, "--quiet", "--threads-per-rank=1"]
        for s in sets:
            cmd += ["--set", s]
        done = subprocess.run(cmd, env=dict(os.environ, TESSERA_RANK_BINARY=RANK), capture_output=True, text=True)
        if not expect_ok:
            self.assertNotEqual(done.returncode, 0, done.stdout)
            return done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        by_step = {}
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                by_step[rec["step"]] = rec["loss"]  # A resumed run repeats no step; the last record wins.
        return [by_step[k] for k in sorted(by_step)]

    def blend_data(self, shuffle):
        return (f"{{shuffle: {shuffle}, seed: 77, blend: [{{path: {self.flat}, weight: 0.7}}, "
                f"{{path: {self.other}, weight: 0.3}}]}}")

    def test_blend_samples_follow_the_documented_definition(self):
        sources = [np.fromfile(self.flat, "<u2"), np.fromfile(self.other, "<u2")]
        for shuffle in (False, True):
            spec = self.write_spec(f"blend_def_{shuffle}", self.blend_data(str(shuffle).lower()),
                                   "{family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 256, seq_len: 16}")
            done = subprocess.run([TESSERA, "data", "samples", spec, "--count", "400"], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            got = [json.loads(line) for line in done.stdout.splitlines()]
            want = blend_reference(sources, [0.7, 0.3], 16, 77, shuffle, 400)
            self.assertEqual([(g["source"], g["source_sample"], g["window"], g["tokens"]) for g in got], want)
            share = sum(1 for s, *_ in want if s == 1) / len(want)
            self.assertAlmostEqual(share, 0.3, delta=1 / 400)
            # Source 0 (277 windows) is in its second epoch by sample 400: with shuffle on, a new permutation.
            self.assertGreater(max(k for s, k, *_ in want if s == 0), 277)
        print("blend: 400 samples equal the documented definition, shuffle off and on")

    def test_blend_resumes_across_dp_with_the_same_losses(self):
        model = "{family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 256, seq_len: 16}"
        batch = "micro_batch: 2, global_batch: 8"
        data = self.blend_data("true")
        whole = self.run_tessera("blend_whole", data, spec=self.write_spec("blend_whole", data, model, 6, batch))
        self.assertEqual(len(whole), 6)
        for dp in (1, 4):
            name = f"blend_dp2_to_{dp}"
            spec = self.write_spec(name, data, model, 3, batch, "checkpoint: {every_steps: 3}\n")
            first = self.run_tessera(name, data, spec=spec, sets=["parallel.dp=2"])
            with open(os.path.join(self.tmp, name, "checkpoints", "step_00000003", "trainer_state.json")) as f:
                state = json.load(f)
            taken = [src["samples_taken"] for src in state["data"]["blend"]]
            self.assertEqual(sum(taken), 24)
            self.assertEqual(taken, [17, 7], "the blend's positions at sample 24 (0.7 / 0.3)")
            spec = self.write_spec(name, data, model, 6, batch, "checkpoint: {every_steps: 3}\n")
            resumed = self.run_tessera(name, data, spec=spec, sets=[f"parallel.dp={dp}"])
            self.assertEqual(len(resumed), 6)
            # Steps 1-3 ran with dp=2, 4-6 with dp: the same samples, summed in another order (fp32).
            for step, (g, w) in enumerate(zip(first + resumed[3:], whole), start=1):
                self.assertLessEqual(abs(g - w), 1e-5 * abs(w), f"dp 2 -> {dp}, step {step}: {g} vs {w}")
            print(f"blend resumed dp 2 -> {dp}: losses {resumed} vs uninterrupted {whole}")

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
