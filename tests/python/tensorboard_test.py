"""TensorBoard event files (OUTPUT_DIR/tensorboard/, formats/tensorboard) read with the `tensorboard`
PyPI package's own reader (EventAccumulator, raw events: purge_orphaned_data off, so that nothing the
reader would hide is hidden):

- every number of every line of steps.jsonl is a scalar of that step, tagged "train/FIELD"
  ("val/FIELD" for val_loss and eval_seconds), with the line's value (TensorBoard keeps fp32);
- a job that logged steps past its last checkpoint and is run again (it resumes from that checkpoint
  and recomputes them) leaves every step exactly once, with the values of the steps.jsonl it ends with.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from tensorboard.backend.event_processing import event_accumulator

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
ENV = dict(os.environ, TESSERA_RANK_BINARY=RANK)


def steps_jsonl(out):
    with open(os.path.join(out, "steps.jsonl")) as f:
        return [json.loads(line) for line in f]


def scalars(out):
    acc = event_accumulator.EventAccumulator(os.path.join(out, "tensorboard"),
                                             size_guidance={event_accumulator.SCALARS: 0},
                                             purge_orphaned_data=False)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class TensorBoardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        rng = np.random.default_rng(5)
        tokens = ((np.arange(40000) * 7 % 256) ^ rng.integers(0, 4, 40000)) % 256
        cls.data = os.path.join(cls.tmp, "tokens.bin")
        tokens.astype("<u2").tofile(cls.data)
        cls.spec = os.path.join(cls.tmp, "spec.yaml")
        with open(cls.spec, "w") as f:
            f.write(f"""name: tb
model: {{family: llama, layers: 2, hidden: 32, heads: 4, kv_heads: 2, vocab: 256, seq_len: 16}}
data: {{path: {cls.data}, valid_fraction: 0.05}}
parallel: {{dp: 2}}
train: {{steps: 8, micro_batch: 2, global_batch: 4, lr: 1.0e-3, eval_every: 2, eval_batches: 1}}
checkpoint: {{every_steps: 4, keep: 3}}
""")

    def run_job(self, out, *sets):
        args = [TESSERA, "run", self.spec, "--quiet", "--set", f"output_dir={out}"]
        for s in sets:
            args += ["--set", s]
        r = subprocess.run(args, env=ENV, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def assert_events_equal_steps(self, out):
        lines = steps_jsonl(out)
        got = scalars(out)
        want = {}
        for line in lines:
            for field, value in line.items():
                if field == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                tag = ("val/" if field in ("val_loss", "eval_seconds") else "train/") + field
                want.setdefault(tag, []).append((line["step"], float(np.float32(value))))
        self.assertEqual(sorted(got), sorted(want))
        self.assertIn("train/loss", got)
        self.assertIn("val/val_loss", got)
        self.assertIn("train/tokens_per_s", got)
        self.assertIn("train/mfu", got)  # Against the CPU's nominal peak (tessera run).
        for tag, events in want.items():
            self.assertEqual(got[tag], events, tag)  # Every step once, in order, with the line's value.
        return lines

    def test_every_number_of_every_step_line_is_a_scalar(self):
        out = os.path.join(self.tmp, "plain")
        self.run_job(out)
        lines = self.assert_events_equal_steps(out)
        self.assertEqual([line["step"] for line in lines], list(range(1, 9)))

    def test_a_resumed_job_leaves_every_step_once(self):
        out = os.path.join(self.tmp, "resumed")
        self.run_job(out, "train.steps=6")  # Checkpoints 4 and 6; steps 1..6 logged.
        # As if the job had died after logging step 6, before its checkpoint was committed.
        shutil.rmtree(os.path.join(out, "checkpoints", "step_00000006"))
        before = scalars(out)["train/loss"]
        self.assertEqual([s for s, _ in before], list(range(1, 7)))
        self.run_job(out)  # Resumes from step 4: steps 5 and 6 again, then 7 and 8.
        lines = self.assert_events_equal_steps(out)
        self.assertEqual([line["step"] for line in lines], list(range(1, 9)))
        self.assertEqual(lines[-1]["resumed_from"], 4)


if __name__ == "__main__":
    unittest.main()
