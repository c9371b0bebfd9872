"""Validation data and val_loss against their documented definitions (docs/data-format.md, "Validation")
and against transformers.

- data.valid_fraction's held-out tail: a job over one file with valid_fraction f trains and evaluates
  bit for bit like a job whose data.path holds the file's first N - V windows and whose data.valid_path
  holds its last V windows (V = floor(N f)), with shuffle on and dp = 2.
- val_loss is the mean next-token cross-entropy of validation samples 0 .. eval_batches * global_batch - 1
  (wrapping around a smaller validation set) under the weights after the step: computed here with
  transformers' GPT2LMHeadModel on the checkpoint `tessera export` writes, for a Megatron-format
  data.valid_path evaluated by a dp=2 x pp=2 job, and for a blend's held-out tails (the blend of
  data_reference.blend_reference over the tails) evaluated with tp=2.
- Bad settings are refused before any rank starts, naming the field.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_reference import blend_reference, write_megatron  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
ENV = dict(os.environ, TESSERA_RANK_BINARY=RANK)
SEQ = 16
MODEL = f"{{family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 256, seq_len: {SEQ}}}"
# tessera's forward against transformers' in fp32, as a mean over 12 x 16 tokens (the logits agree to
# ~1e-6; tests/python/hf_export_test.py holds them to 1e-5).
VAL_RTOL = 1e-5


def noisy_ramp(n, stride, seed):
    rng = np.random.default_rng(seed)
    return ((np.arange(n) * stride % 256) ^ rng.integers(0, 4, n)) % 256


class ValidationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.tokens = noisy_ramp(300 * SEQ + 1, 7, 3)  # N = 300 windows.
        cls.all = os.path.join(cls.tmp, "all.bin")
        cls.tokens.astype("<u2").tofile(cls.all)
        cls.other_tokens = noisy_ramp(120 * SEQ + 1, 5, 4)  # 120 windows.
        cls.other = os.path.join(cls.tmp, "other.bin")
        cls.other_tokens.astype("<u2").tofile(cls.other)

    def run_job(self, name, data, train="", sets=(), ok=True):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {MODEL}
data: {data}
train: {{steps: 4, micro_batch: 2, global_batch: 4, lr: 0.01, warmup_steps: 0, schedule: constant{train}}}
checkpoint: {{every_steps: 4}}
output_dir: {self.tmp}/{name}
""")
        cmd = [TESSERA, "run", spec, "--quiet", "--threads-per-rank=1"]
        for s in sets:
            cmd += ["--set", s]
        done = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
        if not ok:
            self.assertNotEqual(done.returncode, 0, done.stdout)
            return done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            return [json.loads(line) for line in f]

    def val_of_transformers(self, name, samples):
        """Mean cross-entropy of `samples` (windows of SEQ + 1 tokens) under the job's last checkpoint."""
        out = os.path.join(self.tmp, name + "_hf")
        done = subprocess.run([TESSERA, "export", os.path.join(self.tmp, name, "checkpoints"), out],
                              env=ENV, capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        windows = torch.tensor(np.array(samples, dtype=np.int64))
        with torch.no_grad():
            logits = hf(input_ids=windows[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256).double(), windows[:, 1:].reshape(-1))
        return loss.item()

    def test_held_out_tail_is_the_files_last_windows(self):
        n, held = 300, int(np.floor(300 * 0.1))
        head = os.path.join(self.tmp, "head.bin")
        tail = os.path.join(self.tmp, "tail.bin")
        self.tokens[:(n - held) * SEQ + 1].astype("<u2").tofile(head)
        self.tokens[(n - held) * SEQ:].astype("<u2").tofile(tail)
        evals = ", eval_every: 2, eval_batches: 3"
        split = self.run_job("split", f"{{path: {self.all}, valid_fraction: 0.1, shuffle: true, seed: 9}}", evals,
                             ["parallel.dp=2"])
        files = self.run_job("files", f"{{path: {head}, valid_path: {tail}, shuffle: true, seed: 9}}", evals,
                             ["parallel.dp=2"])
        self.assertEqual([r["loss"] for r in split], [r["loss"] for r in files], "the same training samples")
        vals = [(r["step"], r["val_loss"]) for r in split if "val_loss" in r]
        self.assertEqual([s for s, _ in vals], [2, 4], "evaluated after steps 2 and 4")
        self.assertEqual(vals, [(r["step"], r["val_loss"]) for r in files if "val_loss" in r])
        # Training on the whole file differs: the tail is not trained on.
        whole = self.run_job("whole", f"{{path: {self.all}, shuffle: true, seed: 9}}", "", ["parallel.dp=2"])
        self.assertNotEqual([r["loss"] for r in whole], [r["loss"] for r in split])
        self.assertFalse(any("val_loss" in r for r in whole), "no validation data, no evaluation")
        print(f"held-out tail: losses and val_loss {vals} identical to separate head and tail files")

    def test_val_loss_equals_transformers_on_the_documented_samples(self):
        # A Megatron valid_path of 7 windows in random documents; 3 batches of 4 = 12 samples wrap around.
        valid_tokens = noisy_ramp(7 * SEQ + 1, 11, 5)
        rng = np.random.default_rng(6)
        cuts = np.sort(rng.choice(np.arange(1, valid_tokens.size), 9, replace=False))
        prefix = os.path.join(self.tmp, "valid_meg")
        write_megatron(prefix, np.split(valid_tokens, cuts))
        steps = self.run_job("meg", f"{{path: {self.all}, valid_path: {prefix}}}", ", eval_batches: 3",
                             ["parallel.dp=2", "parallel.pp=2"])
        self.assertEqual([r["step"] for r in steps if "val_loss" in r], [4], "eval_every 0: after the last step")
        got = steps[-1]["val_loss"]
        samples = [valid_tokens[(g % 7) * SEQ:(g % 7) * SEQ + SEQ + 1] for g in range(12)]
        want = self.val_of_transformers("meg", samples)
        self.assertLessEqual(abs(got - want), VAL_RTOL * want, f"megatron valid_path: tessera {got} vs {want}")
        print(f"val_loss dp2 x pp2, megatron valid_path: tessera {got:.7f}, transformers {want:.7f}")

        # A blend's held-out tails, blended by the same weights, in order.
        blend = f"{{valid_fraction: 0.1, blend: [{{path: {self.all}, weight: 0.7}}, {{path: {self.other}, weight: 0.3}}]}}"
        steps = self.run_job("blend", blend, ", eval_batches: 3", ["parallel.tp=2"])
        got = steps[-1]["val_loss"]
        tails = [t[((len(t) - 1) // SEQ - (len(t) - 1) // SEQ // 10) * SEQ:] for t in (self.tokens, self.other_tokens)]
        self.assertEqual([(len(t) - 1) // SEQ for t in tails], [30, 12])
        picks = blend_reference(tails, [0.7, 0.3], SEQ, 0, False, 12)
        want = self.val_of_transformers("blend", [p[3] for p in picks])
        self.assertLessEqual(abs(got - want), VAL_RTOL * want, f"blend tails: tessera {got} vs {want}")
        print(f"val_loss tp2, blend of held-out tails: tessera {got:.7f}, transformers {want:.7f}")

    def test_bad_settings_are_named(self):
        err = self.run_job("no_valid", f"{{path: {self.all}}}", ", eval_every: 2", ok=False)
        self.assertIn("train.eval_every: needs validation data: data.valid_path or data.valid_fraction", err)
        err = self.run_job("tiny", f"{{path: {self.all}, valid_fraction: 0.001}}", ok=False)
        self.assertIn("data.valid_fraction 0.001 of its 300 windows of seq_len + 1 = 17 tokens leaves no validation "
                      "window", err)
        err = self.run_job("missing", f"{{path: {self.all}, valid_path: {self.tmp}/nothing.bin}}", ok=False)
        self.assertIn(f"data.valid_path: {self.tmp}/nothing.bin", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
