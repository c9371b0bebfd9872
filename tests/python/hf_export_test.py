"""Hugging Face out, and sampling: `tessera export` writes what transformers' `from_pretrained` loads,
`tessera generate` samples what transformers' `generate` samples.

- Round trip transformers → tessera → transformers, bit-exact in fp32: a save_pretrained model goes in
  as model.pretrained, through one step whose learning rate (1e-300) is below what fp32 can apply (the
  update rounds to nothing, so the weights pass through tessera's loader, its training state and its
  checkpoint writer unchanged), out through `tessera export`; every tensor equals the original bit
  for bit.
- Checkpoints of models tessera trained in parallel layouts (tp=2 × pp=2) exported and loaded by
  from_pretrained give the logits of tessera's own forward pass (`tessera generate --logits-out`),
  fp32, 1e-5. Sharded exports (an index) and bf16 exports load too.
- Greedy `tessera generate` gives the tokens of transformers' `generate(do_sample=False)`, from a
  tessera checkpoint and from a transformers directory.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import safetensors.torch
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_testing import with_random_biases, write_tokens  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
GENERATE = os.path.abspath("generate/tessera-generate")
ENV = dict(os.environ, TESSERA_RANK_BINARY=RANK, TESSERA_GENERATE_BINARY=GENERATE)
SEQ = 32
LOGITS_TOL = 1e-5  # The bar: exported weights in transformers against tessera's forward, fp32.
PROMPT = [5, 17, 42, 99, 3, 250, 7]


def gpt2():
    config = transformers.GPT2Config(vocab_size=256, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(5)
    return transformers.GPT2LMHeadModel(config).float()


def llama():
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(6)
    return transformers.LlamaForCausalLM(config).float()


def tensors(directory):
    """Every tensor of a transformers directory (single file or shards)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            out.update(safetensors.torch.load_file(os.path.join(directory, name)))
    return out


def qwen2():
    config = transformers.Qwen2Config(
        vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False, use_sliding_window=False)
    torch.manual_seed(7)
    return with_random_biases(transformers.Qwen2ForCausalLM(config).float())


class HfExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = write_tokens(cls.tmp, stride=7, seed=13)
        cls.hf = {}
        for name, make in [("gpt2", gpt2), ("llama", llama), ("qwen2", qwen2)]:
            cls.hf[name] = os.path.join(cls.tmp, "hf_" + name)
            make().save_pretrained(cls.hf[name], safe_serialization=True)

    def tessera(self, *args, ok=True):
        done = subprocess.run([TESSERA, *args], env=ENV, capture_output=True, text=True)
        if ok:
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        else:
            self.assertNotEqual(done.returncode, 0, done.stdout + done.stderr)
        return done

    def train(self, name, model, steps, lr, sets=()):
        """A tessera job; returns its checkpoint directory."""
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {model}
data: {{path: {self.data}}}
train: {{steps: {steps}, micro_batch: 4, global_batch: 8, lr: {lr}, warmup_steps: 0}}
checkpoint: {{every_steps: {steps}}}
output_dir: {self.tmp}/{name}
""")
        args = ["run", spec, "--quiet", "--threads-per-rank=1"]
        for s in sets:
            args += ["--set", s]
        self.tessera(*args)
        return os.path.join(self.tmp, name, "checkpoints")

    def export(self, checkpoint, name, *flags):
        out = os.path.join(self.tmp, name)
        self.tessera("export", checkpoint, out, *flags)
        return out

    def test_round_trip_through_tessera_is_bit_exact(self):
        for family in ("gpt2", "llama", "qwen2"):
            with self.subTest(family=family):
                ckpt = self.train(f"rt_{family}", f"{{pretrained: {self.hf[family]}, seq_len: {SEQ}}}", 1, "1e-300")
                out = self.export(ckpt, f"rt_{family}_out")
                want = {k: v for k, v in tensors(self.hf[family]).items()}
                got = tensors(out)
                self.assertEqual(sorted(got), sorted(want))
                for name, t in want.items():
                    self.assertEqual(got[name].dtype, torch.float32, name)
                    self.assertTrue(torch.equal(got[name], t), f"{family} {name} differs after the round trip")

    def logits_of_tessera(self, model, name):
        path = os.path.join(self.tmp, f"{name}_logits.safetensors")
        self.tessera("generate", model, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "0",
                     "--logits-out", path)
        return safetensors.torch.load_file(path)["logits"]

    def logits_of_transformers(self, directory, dtype=torch.float32):
        hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
        with torch.no_grad():
            return hf(input_ids=torch.tensor([PROMPT])).logits[0].float()

    def test_exports_of_parallel_checkpoints_load_in_transformers_with_tesseras_logits(self):
        specs = {
            "gpt": "{family: gpt, layers: 4, hidden: 64, heads: 4, vocab: 256, seq_len: 32}",
            "llama": "{family: llama, layers: 4, hidden: 64, heads: 4, kv_heads: 2, vocab: 256, seq_len: 32}",
        }
        for family, model in specs.items():
            with self.subTest(family=family):
                ckpt = self.train(f"par_{family}", model, 3, "3e-3", ["parallel.tp=2", "parallel.pp=2"])
                out = self.export(ckpt, f"par_{family}_out")
                want = self.logits_of_tessera(ckpt, f"par_{family}")
                got = self.logits_of_transformers(out)
                worst = (got - want).abs().max().item()
                print(f"{family}: exported model's logits vs tessera's: max abs difference {worst:.2e}")
                torch.testing.assert_close(got, want, rtol=LOGITS_TOL, atol=LOGITS_TOL)
                # Sharded above a size limit, with an index: the same model.
                sharded = self.export(ckpt, f"par_{family}_sharded", "--max-shard-size", "100KB")
                with open(os.path.join(sharded, "model.safetensors.index.json")) as f:
                    self.assertGreater(len(set(json.load(f)["weight_map"].values())), 1)
                self.assertTrue(torch.equal(self.logits_of_transformers(sharded), got))
                # bf16: what transformers reads is tessera's weights rounded to bf16.
                bf16 = self.export(ckpt, f"par_{family}_bf16", "--dtype", "bf16")
                exported = tensors(bf16)
                self.assertEqual({t.dtype for t in exported.values()}, {torch.bfloat16})
                full = tensors(out)
                for name, t in exported.items():
                    self.assertTrue(torch.equal(t, full[name].to(torch.bfloat16)), name)

    def test_greedy_generation_matches_transformers(self):
        # Models that learned something (freshly drawn ones repeat one token): trained by tessera,
        # exported; tessera reads both the checkpoint and the transformers directory.
        specs = {
            "gpt": "{family: gpt, layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32, activation: gelu_tanh}",
            "llama": "{family: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, vocab: 256, seq_len: 32}",
        }
        for family, spec in specs.items():
            ckpt = self.train(f"gen_{family}", spec, 30, "3e-3")
            exported = self.export(ckpt, f"gen_{family}_out")
            hf = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
            prompt = [0, 7, 14, 21]  # As the data goes (steps of 7): the answer is not one token.
            # An explicit attention mask: generate would otherwise take token 0 (= pad_token_id) for padding.
            want = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               max_new_tokens=24, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
            self.assertGreater(len(set(want)), 2, "the model says more than one token")
            for model in (ckpt, exported):
                with self.subTest(family=family, model=model):
                    done = self.tessera("generate", model, "--prompt-ids", ",".join(map(str, prompt)),
                                        "--max-new-tokens", "24", "--json")
                    self.assertEqual(json.loads(done.stdout)["tokens"], want)

    def test_text_prompt_through_the_models_tokenizer(self):
        # A model directory with its tokenizer.json (byte-level BPE of 320 tokens, trained here):
        # `generate --prompt TEXT` encodes with it and prints text; ids and text are the library's.
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(["the quick brown fox jumps over the lazy dog, naïvely. "] * 20,
                                trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                    show_progress=False))
        config = transformers.LlamaConfig(
            vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
        torch.manual_seed(8)
        directory = os.path.join(self.tmp, "hf_llama_tok")
        transformers.LlamaForCausalLM(config).float().save_pretrained(directory, safe_serialization=True)
        tok.save(os.path.join(directory, "tokenizer.json"))
        text = "the lazy fox, naïvely"
        done = json.loads(self.tessera("generate", directory, "--prompt", text, "--max-new-tokens", "12",
                                       "--json").stdout)
        prompt = tok.encode(text).ids
        self.assertEqual(done["prompt"], prompt)
        hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        want = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                           max_new_tokens=12, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
        self.assertEqual(done["tokens"], want)
        self.assertEqual(done["text"], tok.decode(want))
        # Streamed, each token's bytes as it comes: the same text.
        streamed = subprocess.run([TESSERA, "generate", directory, "--prompt", text, "--max-new-tokens", "12"],
                                  env=ENV, capture_output=True).stdout
        self.assertEqual(streamed.decode("utf-8", errors="replace"), tok.decode(want) + "\n")
        self.assertIn("--tokenizer: ", self.tessera("generate", directory, "--prompt", "x", "--tokenizer",
                                                    os.path.join(self.tmp, "none.json"), ok=False).stderr)

    def test_sampling_is_seeded_and_checked(self):
        model = self.hf["llama"]
        args = ["generate", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--temperature", "0.8",
                "--top-k", "20", "--json"]
        first = json.loads(self.tessera(*args, "--seed", "7").stdout)["tokens"]
        self.assertEqual(json.loads(self.tessera(*args, "--seed", "7").stdout)["tokens"], first)
        self.assertEqual(len(first), 8)
        self.assertIn("prompt token 1 is 300, outside the vocabulary [0, 256)",
                      self.tessera("generate", model, "--prompt-ids", "1,300", ok=False).stderr)
        # 32 learned positions: the prompt's and each generated token's but the last (never read back).
        self.assertIn("need 33 positions, more than the model's 32 learned positions",
                      self.tessera("generate", self.hf["gpt2"], "--prompt-ids", "1", "--max-new-tokens", "33",
                                   ok=False).stderr)
        full = ",".join(["1"] * 32)
        self.assertEqual(len(json.loads(self.tessera("generate", self.hf["gpt2"], "--prompt-ids", full,
                                                     "--max-new-tokens", "1", "--json").stdout)["tokens"]), 1)
        self.assertEqual(len(json.loads(self.tessera("generate", self.hf["gpt2"], "--prompt-ids", "1",
                                                     "--max-new-tokens", "32", "--json").stdout)["tokens"]), 32)
        self.assertIn("--prompt: is empty; the model needs at least one token",
                      self.tessera("generate", model, "--prompt", "", ok=False).stderr)

    def test_export_refuses_what_it_cannot_do(self):
        self.assertIn("nothing-here: not a directory",
                      self.tessera("export", self.tmp + "/nothing-here", self.tmp + "/x", ok=False).stderr)
        self.assertIn("no checkpoint (step_NNNNNNNN with trainer_state.json)",
                      self.tessera("export", self.hf["gpt2"], self.tmp + "/x", ok=False).stderr)
        ckpt = self.train("refuse", "{layers: 1, hidden: 32, heads: 2, seq_len: 16}", 1, "1e-3")
        self.tessera("export", ckpt, self.tmp + "/refuse_out")
        self.assertIn("exists and is not an empty directory",
                      self.tessera("export", ckpt, self.tmp + "/refuse_out", ok=False).stderr)
        self.assertIn("--dtype: \"fp8\" is not fp32 or bf16",
                      self.tessera("export", ckpt, self.tmp + "/y", "--dtype", "fp8", ok=False).stderr)
        self.assertIn("--max-shard-size: \"5XB\" is not a positive size",
                      self.tessera("export", ckpt, self.tmp + "/y", "--max-shard-size", "5XB", ok=False).stderr)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
