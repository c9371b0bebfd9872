"""Hugging Face in: transformers models written by `save_pretrained` trained by tessera from
`model.pretrained: DIR` give the losses of the same training done in PyTorch on the transformers
model itself (loaded back with `from_pretrained`).

A GPT2LMHeadModel (Conv1D weights stored [in, out], the "transformer." prefix, causal-mask buffers,
more learned positions than seq_len) and a LlamaForCausalLM (grouped-query attention, an untied head)
are drawn by transformers; both sides train 10 steps on the same data and sample order with warmup,
cosine LR, weight decay and clipping (gpt_reference.train, AdamW). Losses agree within 1e-4 relative
in one process and 1e-3 with tensor or pipeline parallelism (sums in another order, amplified by
Adam). A sharded save and a bf16 save load too. Nothing is downloaded: transformers comes from the
project's venv (tools/setup.sh).
"""
import json
import os
import sys
import tempfile
import unittest

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from hf_testing import (CausalLm, assert_losses_close, run_tessera, with_random_biases,  # noqa: E402
                        write_pretrained_spec, write_tokens)

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
VOCAB, SEQ = 256, 32
MICRO, GLOBAL, STEPS = 4, 8, 10
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 2e-3, 2e-4, 3, 0.1, (0.9, 0.95), 1e-8, 1.0
SINGLE_TOL = 1e-4    # The bar for one process against transformers.
PARALLEL_TOL = 1e-3  # With tp / pp.


def gpt2():
    # No dropout: tessera trains without it (docs/models.md); 64 learned positions, seq_len 32.
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(3)
    return transformers.GPT2LMHeadModel(config).float()


def llama():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False, hidden_act="silu")
    torch.manual_seed(4)
    return transformers.LlamaForCausalLM(config).float()


def llama3(scaled=True):
    # Llama 3.1's rope scaling, with a pre-training context of 16 so that it changes most frequencies
    # of this small head dimension, and weights drawn wide enough (std 0.1) for positions to matter.
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16} if scaled else None,
        tie_word_embeddings=False, hidden_act="silu", initializer_range=0.1)
    torch.manual_seed(4)
    return transformers.LlamaForCausalLM(config).float()


def qwen2():
    # Qwen2: Llama's shape with q, k and v biases (drawn non-zero here so that they matter).
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, use_sliding_window=False)
    torch.manual_seed(8)
    return with_random_biases(transformers.Qwen2ForCausalLM(config).float())


class HfImportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = write_tokens(cls.tmp, stride=5, seed=11)
        cls.dirs = {}
        for name, make, kwargs in [("gpt2", gpt2, {}), ("llama", llama, {}),
                                   ("llama_sharded", llama, {"max_shard_size": "40KB"}),
                                   ("llama_bf16", lambda: llama().to(torch.bfloat16), {}),
                                   ("llama3", llama3, {}), ("qwen2", qwen2, {})]:
            d = os.path.join(cls.tmp, name)
            make().save_pretrained(d, safe_serialization=True, **kwargs)
            cls.dirs[name] = d
        cls.want = {}

    def reference(self, name):
        if name not in self.want:
            # transformers' own reading of the directory, trained in fp32.
            hf = transformers.AutoModelForCausalLM.from_pretrained(self.dirs[name], torch_dtype=torch.float32)
            samples = gpt_reference.Samples(self.data, SEQ, False, 0)
            self.want[name] = gpt_reference.train(CausalLm(hf), samples, STEPS, MICRO, GLOBAL, LR, MIN_LR, WARMUP,
                                                  True, WD, BETAS, ADAM_EPS, CLIP)
        return self.want[name]

    def run_tessera(self, name, model, sets=(), expect_ok=True):
        spec = write_pretrained_spec(self.tmp, name, self.dirs[model], self.data, SEQ, STEPS, MICRO, GLOBAL, LR,
                                     MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP)
        done = run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        if not expect_ok:
            self.assertNotEqual(done.returncode, 0, done.stdout + done.stderr)
            return done.stderr
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            return [json.loads(line)["loss"] for line in f]

    def check(self, name, model, sets, tol):
        got = self.run_tessera(name, model, sets)
        assert_losses_close(self, f"{name} {list(sets)}", got, self.reference(model), STEPS, tol)
        return got

    def test_gpt2_single_process_matches_transformers(self):
        self.check("gpt2", "gpt2", [], SINGLE_TOL)

    def test_gpt2_tensor_parallel_matches_transformers(self):
        self.check("gpt2_tp2", "gpt2", ["parallel.tp=2"], PARALLEL_TOL)

    def test_gpt2_pipeline_parallel_matches_transformers(self):
        self.check("gpt2_pp2", "gpt2", ["parallel.pp=2"], PARALLEL_TOL)

    def test_llama_single_process_matches_transformers(self):
        self.check("llama", "llama", [], SINGLE_TOL)

    def test_llama_tensor_parallel_matches_transformers(self):
        self.check("llama_tp2", "llama", ["parallel.tp=2"], PARALLEL_TOL)

    def test_llama_pipeline_parallel_matches_transformers(self):
        self.check("llama_pp2", "llama", ["parallel.pp=2"], PARALLEL_TOL)

    def test_llama3_rope_scaling_matches_transformers(self):
        got = self.check("llama3", "llama3", [], SINGLE_TOL)
        # The test can fail: the same weights without the scaling train to losses 100× the tolerance away.
        samples = gpt_reference.Samples(self.data, SEQ, False, 0)
        unscaled = gpt_reference.train(CausalLm(llama3(scaled=False)), samples, STEPS, MICRO, GLOBAL, LR, MIN_LR,
                                       WARMUP, True, WD, BETAS, ADAM_EPS, CLIP)
        gap = max(abs(g - u) / abs(u) for g, u in zip(got, unscaled))
        self.assertGreater(gap, 10 * SINGLE_TOL, "rope scaling changes the losses")
        print(f"llama3: without the scaling the losses would differ by {gap:.2e}")

    def test_qwen2_with_qkv_biases_matches_transformers(self):
        self.check("qwen2", "qwen2", [], SINGLE_TOL)
        self.check("qwen2_tp2", "qwen2", ["parallel.tp=2"], PARALLEL_TOL)  # Bias rows split with their heads.
        self.check("qwen2_tp4", "qwen2", ["parallel.tp=4"], PARALLEL_TOL)  # Key/value biases shared.

    def test_sharded_save_loads_the_same_weights(self):
        index = os.path.join(self.dirs["llama_sharded"], "model.safetensors.index.json")
        self.assertTrue(os.path.exists(index), "save_pretrained wrote shards")
        with open(index) as f:
            self.assertGreater(len(set(json.load(f)["weight_map"].values())), 1)
        self.assertEqual(self.run_tessera("llama_sharded", "llama_sharded"), self.run_tessera("llama_once", "llama"))

    def test_bf16_save_matches_transformers_reading_it(self):
        with open(os.path.join(self.dirs["llama_bf16"], "model.safetensors"), "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        self.assertEqual({e["dtype"] for k, e in header.items() if k != "__metadata__"}, {"BF16"})
        self.check("llama_bf16", "llama_bf16", [], SINGLE_TOL)

    def test_spec_sizes_that_disagree_with_config_json_name_both_values(self):
        err = self.run_tessera("mismatch", "llama", ["model.hidden=32", "model.family=gpt"], expect_ok=False)
        self.assertIn("model.hidden: 32 in the spec, 64 in", err)
        self.assertIn("(hidden_size)", err)
        self.assertIn("model.family: gpt in the spec, llama in", err)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
