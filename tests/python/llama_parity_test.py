"""Parity: tessera's Llama (C++, `tessera run`) against transformers' own LlamaForCausalLM.

transformers draws the model (its own initialisation, grouped-query attention, an untied head); its
weights go to tessera as model.init_from (transformers' names less the "model." prefix, the names
tessera's Llama uses). Both train 10 steps on the same data and sample order with warmup, cosine LR,
weight decay and clipping (the PyTorch loop of gpt_reference.train, AdamW): per-step losses must agree
within 1e-4 relative in one process, and within 1e-3 with tensor / pipeline parallelism (reduction
order). Run by Bazel (tests/BUILD.bazel) from the runfiles directory; transformers comes from the
project's venv (tools/setup.sh), nothing is downloaded.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from hf_testing import CausalLm, assert_losses_close, write_tokens  # noqa: E402
import safetensors_io  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 2, 64, 4, 2, 160, 256, 32
EPS, THETA = 1e-5, 10000.0
MICRO, GLOBAL, STEPS = 4, 8, 10
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 2e-3, 2e-4, 3, 0.1, (0.9, 0.95), 1e-8, 1.0
SINGLE_TOL = 1e-4    # The bar for one process against transformers.
PARALLEL_TOL = 1e-3  # With tp / pp: sums in another order, amplified by Adam over 10 steps.


def hf_llama():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False, hidden_act="silu")
    torch.manual_seed(1)
    return transformers.LlamaForCausalLM(config).float()


class LlamaParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = write_tokens(cls.tmp, stride=3, seed=7, repeats=200)
        state = hf_llama().state_dict()
        cls.init = os.path.join(cls.tmp, "init.safetensors")
        safetensors_io.save(cls.init, {k.removeprefix("model."): v.contiguous() for k, v in state.items()
                                       if not k.endswith("rotary_emb.inv_freq")})
        cls.want = {}

    def reference(self, shuffle):
        if shuffle not in self.want:
            model = CausalLm(hf_llama())  # The same draw as the init file.
            samples = gpt_reference.Samples(self.data, SEQ, shuffle, 99)
            self.want[shuffle] = gpt_reference.train(model, samples, STEPS, MICRO, GLOBAL, LR, MIN_LR, WARMUP,
                                                     True, WD, BETAS, ADAM_EPS, CLIP)
        return self.want[shuffle]

    def run_tessera(self, name, shuffle, sets):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {VOCAB}, seq_len: {SEQ}, norm_eps: {EPS}, rope_theta: {THETA},
        init_from: {self.init}}}
data: {{path: {self.data}, shuffle: {str(shuffle).lower()}, seed: 99}}
train: {{steps: {STEPS}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}}}
output_dir: {self.tmp}/{name}
""")
        cmd = [TESSERA, "run", spec, "--quiet", "--threads-per-rank=1"]
        for s in sets:
            cmd += ["--set", s]
        done = subprocess.run(cmd, env=dict(os.environ, TESSERA_RANK_BINARY=RANK), capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            return [json.loads(line)["loss"] for line in f]

    def check(self, name, shuffle, sets, tol):
        got = self.run_tessera(name, shuffle, sets)
        assert_losses_close(self, f"{name} {sets}", got, self.reference(shuffle), STEPS, tol)

    def test_single_process_matches_transformers(self):
        self.check("single", False, [], SINGLE_TOL)

    def test_tensor_parallel_with_key_value_heads_split_matches_transformers(self):
        self.check("tp2", True, ["parallel.tp=2"], PARALLEL_TOL)  # kv_heads 2 over tp 2: one each.

    def test_tensor_parallel_with_key_value_heads_shared_matches_transformers(self):
        self.check("tp4", True, ["parallel.tp=4"], PARALLEL_TOL)  # kv_heads 2 < tp 4: two ranks per head.

    def test_data_and_pipeline_parallel_match_transformers(self):
        self.check("dp2pp2", False, ["parallel.dp=2", "parallel.pp=2"], PARALLEL_TOL)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
