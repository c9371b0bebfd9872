"""SFT parity: tessera fine-tuning a transformers LlamaForCausalLM on chat data (`tessera data prepare
--chat`, then `tessera run`) against the same training in PyTorch with transformers: conversations
rendered by transformers' apply_chat_template, one per sample truncated to seq_len + 1 tokens and
right-padded, the loss only on the assistant turns (flags by the definition, computed here with the
`tokenizers` library's offsets: sft_data_test.reference), normalised by the trained targets of the
whole global batch (so dp, gradient accumulation and padding do not change it), AdamW with warmup,
cosine LR, weight decay and clipping. Per-step losses within 1e-4 relative in one process, 1e-3 with
dp=2, tp=2, 2D tp=4, sp=2, pp=2 and ZeRO-2; the step log's trained_tokens equal the reference's counts."""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

import torch
import transformers
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_test as ct  # noqa: E402
import gpt_reference  # noqa: E402
import safetensors_io  # noqa: E402
import sft_data_test  # noqa: E402
import hf_testing  # noqa: E402
from hf_testing import assert_losses_close  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, SEQ = 2, 64, 4, 2, 160, 48
EPS, THETA = 1e-5, 10000.0
MICRO, GLOBAL, STEPS = 2, 8, 10
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 2e-3, 2e-4, 3, 0.1, (0.9, 0.95), 1e-8, 1.0
SINGLE_TOL, PARALLEL_TOL = 1e-4, 1e-3

WORDS = ("the cat sat on a mat while two dogs ran past the old barn and the farmer laughed at them "
         "Grüße 👋 日本語 what why how when numbers 12 345 6789").split()


def conversations(n, seed):
    """Seeded multi-turn conversations: some with a system prompt, some longer than seq_len + 1 tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        conv = []
        if rng.random() < 0.4:
            conv.append({"role": "system", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))})
        for _ in range(rng.randint(1, 3)):
            conv.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))})
            conv.append({"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))})
        out.append(conv)
    return out


def hf_llama(vocab):
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False, hidden_act="silu")
    torch.manual_seed(3)
    return transformers.LlamaForCausalLM(config).float()


def train_reference(model, samples):
    """gpt_reference.train's loop with the SFT loss: Σ cross-entropy over the global batch's trained
    targets / their number. `samples` are (window, target mask) pairs, window SEQ + 1 ids."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
    losses, counts = [], []
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = gpt_reference.lr_at(step, LR, MIN_LR, WARMUP, STEPS, True)
        opt.zero_grad(set_to_none=True)
        batch = [samples[g % len(samples)] for g in range(step * GLOBAL, (step + 1) * GLOBAL)]
        trained = sum(int(m.sum()) for _, m in batch)
        total = 0.0
        for a in range(0, GLOBAL, MICRO):
            w = torch.stack([s for s, _ in batch[a:a + MICRO]])
            m = torch.stack([m for _, m in batch[a:a + MICRO]])
            logits = model(input_ids=w[:, :-1]).logits
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), w[:, 1:].reshape(-1),
                                                   reduction="none")
            loss = (ce * m.reshape(-1)).sum() / trained
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(total)
        counts.append(trained)
    return losses, counts


class SftParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        fast = PreTrainedTokenizerFast(tokenizer_object=ct.small_tokenizer(), bos_token="<s>", eos_token="</s>",
                                       additional_special_tokens=["<|im_start|>", "<|im_end|>"])
        fast.chat_template = ct.CHATML
        cls.tokenizer_dir = os.path.join(cls.tmp, "tokenizer")
        fast.save_pretrained(cls.tokenizer_dir)
        hf = PreTrainedTokenizerFast.from_pretrained(cls.tokenizer_dir)
        cls.vocab = len(hf)
        convs = conversations(24, seed=5)
        records = [{"messages": c} for c in convs]
        with open(os.path.join(cls.tmp, "chat.jsonl"), "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        cls.data = os.path.join(cls.tmp, "sft")
        done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", cls.tokenizer_dir, "--chat",
                               os.path.join(cls.tmp, "chat.jsonl"), cls.data], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # The reference's samples: the definition's ids and flags, truncated and padded here.
        cls.samples = []
        longer = shorter = 0
        for r in records:
            ids, flags = sft_data_test.reference(hf, r)
            longer += len(ids) > SEQ + 1
            shorter += len(ids) < SEQ + 1
            ids, flags = ids[:SEQ + 1], flags[:SEQ + 1]
            pad = SEQ + 1 - len(ids)
            window = torch.tensor(ids + [0] * pad)
            mask = torch.tensor(flags[1:] + [0] * pad, dtype=torch.float32)  # Target t is token t + 1.
            cls.samples.append((window, mask))
        assert longer > 0 and shorter > 0, (longer, shorter)  # Truncation and padding both exercised.
        state = hf_llama(cls.vocab).state_dict()
        cls.init = os.path.join(cls.tmp, "init.safetensors")
        safetensors_io.save(cls.init, {k.removeprefix("model."): v.contiguous() for k, v in state.items()
                                       if not k.endswith("rotary_emb.inv_freq")})
        cls.want, cls.want_counts = train_reference(hf_llama(cls.vocab), cls.samples)

    def run_tessera(self, name, sets):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {self.vocab}, seq_len: {SEQ}, norm_eps: {EPS}, rope_theta: {THETA},
        init_from: {self.init}}}
data: {{path: {self.data}}}
train: {{steps: {STEPS}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}}}
output_dir: {self.tmp}/{name}
""")
        done = hf_testing.run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            steps = [json.loads(line) for line in f]
        self.assertEqual([s["trained_tokens"] for s in steps], self.want_counts, "trained targets per step")
        return [s["loss"] for s in steps]

    def test_the_example_prepares_and_trains(self):
        # examples/sft-llama.yaml as its comment says, for a few steps.
        data = os.path.join(self.tmp, "example-sft")
        done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", "examples/sft", "--chat",
                               "examples/sft/chats.jsonl", data], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("48 conversations", done.stdout)
        out = os.path.join(self.tmp, "example")
        done = hf_testing.run_tessera(TESSERA, "examples/sft-llama.yaml",
                                      [f"data.path={data}", f"output_dir={out}", "train.steps=3",
                                       "checkpoint.every_steps=0"],
                                      dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(out, "steps.jsonl")) as f:
            steps = [json.loads(line) for line in f]
        self.assertEqual(len(steps), 3)
        for s in steps:
            self.assertGreater(s["trained_tokens"], 0)
            self.assertLess(s["trained_tokens"], 16 * 64)  # Prompts and padding are not trained.

    def test_what_is_not_built_yet_is_refused_by_name(self):
        for sets, words in [(["data.packing=true"], "data.packing: true is not supported yet"),
                            (["data.valid_fraction=0.2", "train.eval_every=5"], "validation on SFT data is not supported")]:
            spec = os.path.join(self.tmp, "refused.yaml")
            with open(spec, "w") as f:
                f.write(f"""name: refused
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {self.vocab}, seq_len: {SEQ}}}
data: {{path: {self.data}}}
train: {{steps: 1, micro_batch: {MICRO}, global_batch: {GLOBAL}}}
output_dir: {self.tmp}/refused
""")
            done = hf_testing.run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
            self.assertNotEqual(done.returncode, 0, sets)
            self.assertIn(words, done.stdout + done.stderr + self.rank_logs("refused"), sets)

    def rank_logs(self, name):
        logs = os.path.join(self.tmp, name, "logs")
        if not os.path.isdir(logs):
            return ""
        text = ""
        for name in sorted(os.listdir(logs)):
            with open(os.path.join(logs, name), errors="replace") as f:
                text += f.read()
        return text

    def check(self, name, sets, tol):
        assert_losses_close(self, f"{name} {sets}", self.run_tessera(name, sets), self.want, STEPS, tol)

    def test_single_process_matches_transformers(self):
        self.check("single", [], SINGLE_TOL)

    def test_data_parallel_matches_transformers(self):
        self.check("dp2", ["parallel.dp=2"], PARALLEL_TOL)

    def test_tensor_parallel_matches_transformers(self):
        self.check("tp2", ["parallel.tp=2"], PARALLEL_TOL)

    def test_grid_tensor_parallel_matches_transformers(self):
        # 2D: each rank's samples' untrained targets masked in the grid's vocab-parallel loss.
        self.check("tp2d", ["parallel.tp=4", "parallel.tp_mode=2d"], PARALLEL_TOL)

    def test_sequence_parallel_matches_transformers(self):
        # Each rank's block of the sequence: its trained targets weigh sp times its share.
        self.check("sp2", ["parallel.sp=2"], PARALLEL_TOL)

    def test_pipeline_parallel_matches_transformers(self):
        self.check("pp2", ["parallel.pp=2"], PARALLEL_TOL)

    def test_zero2_matches_transformers(self):
        self.check("zero2", ["parallel.dp=2", "parallel.zero_stage=2"], PARALLEL_TOL)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
