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
PACKED_SEQ = 192  # Packing tests: windows that hold several of the conversations (25 to 226 tokens).

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


def unpacked(convs):
    """One conversation per window, truncated to SEQ + 1 tokens (the unpacked samples)."""
    return [[(ids[:SEQ + 1], flags[:SEQ + 1])] for ids, flags in convs]


def packs(convs, seq):
    """The documented greedy packing: conversations in file order, a pack taking the next ones while
    their lengths sum to at most seq + 1 (a longer one alone, truncated). Returns, per pack, its pieces
    (ids, flags) as the pack holds them."""
    out, used = [], 0
    for ids, flags in convs:
        if not out or used + len(ids) > seq + 1:
            out.append([])
            used = 0
        out[-1].append((ids, flags))
        used += len(ids)
    pieces = []
    for pack in out:
        room, kept = seq + 1, []
        for ids, flags in pack:
            n = min(len(ids), room)
            kept.append((ids[:n], flags[:n]))
            room -= n
        pieces.append(kept)
    return pieces


def validation_loss(model, windows, batches):
    """Σ cross-entropy over the trained targets of the first `batches` validation batches (sample g
    reads windows[g % len]) / their number; each window a list of (ids, flags) conversations, each run
    through the model alone."""
    total, trained = 0.0, 0
    with torch.no_grad():
        for g in range(batches * GLOBAL):
            for ids, flags in windows[g % len(windows)]:
                if len(ids) < 2:
                    continue
                x = torch.tensor([ids])
                ce = torch.nn.functional.cross_entropy(model(input_ids=x[:, :-1]).logits[0], x[0, 1:], reduction="none")
                total += float((ce.double() * torch.tensor(flags[1:], dtype=torch.float64)).sum())
                trained += sum(flags[1:])
    return total / trained


def train_reference(model, windows, steps=STEPS, lr=LR, min_lr=MIN_LR, valid=None, eval_every=0):
    """gpt_reference.train's loop with the SFT loss — Σ cross-entropy over the global batch's trained
    targets / their number — on windows of conversations (one each, unpacked; several, packed), each
    conversation run through the transformers model alone (so nothing crosses a conversation, and
    positions restart; a sample's padding changes no earlier token's loss). With `valid` windows, also the
    validation loss (one batch) after every eval_every-th step: returns (losses, counts, val_losses)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=BETAS, eps=ADAM_EPS, foreach=False)
    losses, counts, vals = [], [], []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = gpt_reference.lr_at(step, lr, min_lr, WARMUP, steps, True)
        opt.zero_grad(set_to_none=True)
        batch = [windows[g % len(windows)] for g in range(step * GLOBAL, (step + 1) * GLOBAL)]
        trained = sum(sum(flags[1:]) for window in batch for _, flags in window)
        total = 0.0
        for window in batch:
            for ids, flags in window:
                if len(ids) < 2:
                    continue
                x = torch.tensor([ids])
                logits = model(input_ids=x[:, :-1]).logits
                ce = torch.nn.functional.cross_entropy(logits[0], x[0, 1:], reduction="none")
                loss = (ce * torch.tensor(flags[1:], dtype=torch.float32)).sum() / max(trained, 1)
                loss.backward()
                total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(total)
        counts.append(trained)
        if valid and (step + 1) % eval_every == 0:
            vals.append(validation_loss(model, valid, 1))
    return (losses, counts, vals) if valid else (losses, counts)


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
        records = cls.records = [{"messages": c} for c in convs]
        with open(os.path.join(cls.tmp, "chat.jsonl"), "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        cls.data = os.path.join(cls.tmp, "sft")
        done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", cls.tokenizer_dir, "--chat",
                               os.path.join(cls.tmp, "chat.jsonl"), cls.data], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # The reference's conversations: the definition's ids and flags; unpacked, each truncated to
        # SEQ + 1 tokens.
        cls.conversations = [sft_data_test.reference(hf, r) for r in records]
        lengths = [len(ids) for ids, _ in cls.conversations]
        assert max(lengths) > SEQ + 1 and min(lengths) < SEQ + 1, lengths  # Truncation and padding both exercised.
        cls.windows = unpacked(cls.conversations)
        state = hf_llama(cls.vocab).state_dict()
        cls.init = os.path.join(cls.tmp, "init.safetensors")
        safetensors_io.save(cls.init, {k.removeprefix("model."): v.contiguous() for k, v in state.items()
                                       if not k.endswith("rotary_emb.inv_freq")})
        cls.want, cls.want_counts = train_reference(hf_llama(cls.vocab), cls.windows)

    def write_spec(self, name, data=None):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {self.vocab}, seq_len: {SEQ}, norm_eps: {EPS}, rope_theta: {THETA},
        init_from: {self.init}}}
data: {data or f"{{path: {self.data}}}"}
train: {{steps: {STEPS}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}}}
output_dir: {self.tmp}/{name}
""")
        return spec

    def run_tessera(self, name, sets, counts=None, data=None):
        """Losses per step of `tessera run` (`data`: the spec's data section, default the prepared
        dataset); the trained targets per step must be `counts` (None: the unpacked reference's;
        False: not checked)."""
        spec = self.write_spec(name, data)
        done = hf_testing.run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            steps = [json.loads(line) for line in f]
        if counts is not False:
            self.assertEqual([s["trained_tokens"] for s in steps], counts or self.want_counts, "trained targets per step")
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

    def test_packed_conversations_train_as_each_alone(self):
        # Packed windows (several conversations each, a long one alone and truncated): the same training
        # as running each conversation through transformers alone — so attention never crosses a
        # conversation and positions restart — in one process and in the layouts below.
        windows = packs(self.conversations, PACKED_SEQ)
        print(f"{len(self.conversations)} conversations in {len(windows)} packs of "
              f"{sorted(len(w) for w in windows)} conversations")
        self.assertTrue(any(len(w) >= 2 for w in windows), "packs of several conversations")
        self.assertTrue(any(len(c[0]) > PACKED_SEQ + 1 for c in self.conversations), "a truncated conversation")
        want, counts = train_reference(hf_llama(self.vocab), windows)
        # Held to SINGLE_TOL in every layout (measured ≤ 1e-7): attention across conversations moves
        # the losses by ~7e-4 here, within PARALLEL_TOL.
        for name, sets in [("packed", []), ("packed_dp2", ["parallel.dp=2"]), ("packed_tp2", ["parallel.tp=2"]),
                           ("packed_pp2_ckpt", ["parallel.pp=2", "train.activation_checkpointing=true"]),
                           ("packed_2d", ["parallel.tp=4", "parallel.tp_mode=2d"]),
                           ("packed_sp2_ring", ["parallel.sp=2"]),
                           ("packed_sp2_a2a_pp2", ["parallel.sp=2", "parallel.sp_mode=all_to_all", "parallel.pp=2"]),
                           ("packed_zero2", ["parallel.dp=2", "parallel.zero_stage=2"])]:
            got = self.run_tessera(name, ["data.packing=true", f"model.seq_len={PACKED_SEQ}"] + sets, counts)
            assert_losses_close(self, f"{name} {sets}", got, want, STEPS, SINGLE_TOL)
        # The test can fail: training on the same windows as one sequence each (attention across
        # conversations, positions running on) gives other losses.
        joined = []
        for w in windows:
            ids = [t for piece, _ in w for t in piece]
            flags = list(w[0][1]) + [f for _, piece_flags in w[1:] for f in [0] + list(piece_flags[1:])]
            joined.append([(ids, flags)])
        across, across_counts = train_reference(hf_llama(self.vocab), joined)
        self.assertEqual(across_counts, counts)
        gap = max(abs(a - w) / abs(w) for a, w in zip(across, want))
        print(f"attention across conversations would move the losses by up to {gap:.2e}")
        self.assertGreater(gap, 3 * SINGLE_TOL)

    def test_a_packed_epoch_sums_the_same_losses_as_an_unpacked_one(self):
        # lr 0, one sample per step, every conversation once: Σ loss × trained targets over the steps is
        # the sum of every trained target's cross-entropy, packed or not.
        sums = {}
        for name, packing, steps in [("epoch", "false", len(self.conversations)),
                                     ("epoch_packed", "true", len(packs(self.conversations, PACKED_SEQ)))]:
            # lr 1e-30: no weight moves in fp32 (the spec needs a positive lr).
            self.run_tessera(name, [f"data.packing={packing}", f"model.seq_len={PACKED_SEQ}", "train.lr=1e-30",
                                    "train.min_lr=1e-30", "train.warmup_steps=0",
                                    "train.micro_batch=1", "train.global_batch=1", f"train.steps={steps}"],
                             counts=False)
            with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
                steps_log = [json.loads(line) for line in f]
            self.assertEqual(len(steps_log), steps)
            sums[name] = sum(s["loss"] * s["trained_tokens"] for s in steps_log)
        print(f"an epoch's summed cross-entropy: unpacked {sums['epoch']:.6f}, packed {sums['epoch_packed']:.6f}")
        self.assertLessEqual(abs(sums["epoch"] - sums["epoch_packed"]), SINGLE_TOL * abs(sums["epoch"]))

    def test_blends_of_conversations_train_as_their_samples(self):
        # Two SFT datasets (the first and the last 12 conversations) blended 2:1, unpacked and packed:
        # tessera picks the samples (`tessera data samples` says which source and window each global
        # sample reads); the reference trains on those conversations, by its own definition.
        halves = []
        for h, part in enumerate((self.records[:12], self.records[12:])):
            path = os.path.join(self.tmp, f"chat_{h}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for r in part:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            prefix = os.path.join(self.tmp, f"sft_{h}")
            done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", self.tokenizer_dir,
                                   "--chat", path, prefix], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            halves.append(prefix)
        convs = (self.conversations[:12], self.conversations[12:])
        data = f"{{blend: [{{path: {halves[0]}, weight: 2}}, {{path: {halves[1]}, weight: 1}}]}}"
        for name, packing in [("blend", False), ("blend_packed", True)]:
            sets = [f"data.packing={str(packing).lower()}"] + ([f"model.seq_len={PACKED_SEQ}"] if packing else [])
            spec = self.write_spec(f"{name}_order", data)
            cmd = [TESSERA, "data", "samples", spec, "--count", str(STEPS * GLOBAL)]
            for x in sets:
                cmd += ["--set", x]
            done = subprocess.run(cmd, capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            order = [(json.loads(line)["source"], json.loads(line)["window"]) for line in done.stdout.splitlines()]
            self.assertEqual({source for source, _ in order}, {0, 1})
            if packing:
                windows = [packs(convs[source], PACKED_SEQ)[w] for source, w in order]
                want, counts = train_reference(hf_llama(self.vocab), windows)
            else:
                windows = [unpacked(convs[source])[w] for source, w in order]
                want, counts = train_reference(hf_llama(self.vocab), windows)
            got = self.run_tessera(name, sets + ["parallel.dp=2"], counts, data)
            assert_losses_close(self, name, got, want, STEPS, PARALLEL_TOL)

    def test_validation_on_held_out_conversations(self):
        # data.valid_fraction 0.25 holds out the last quarter of the windows (conversations, or packs);
        # val_loss after steps 5 and 10 is Σ cross-entropy over the validation batch's trained targets /
        # their number, as the reference computes it on those conversations alone.
        for name, sets, packed in [("valid", [], False),
                                   ("valid_packed_pp2", ["parallel.pp=2", f"model.seq_len={PACKED_SEQ}"], True)]:
            windows = packs(self.conversations, PACKED_SEQ) if packed else unpacked(self.conversations)
            held = len(windows) // 4
            train, valid = windows[:-held], windows[-held:]
            want, counts, vals = train_reference(hf_llama(self.vocab), train, valid=valid, eval_every=5)
            got = self.run_tessera(name, sets + [f"data.packing={str(packed).lower()}", "data.valid_fraction=0.25",
                                                 "train.eval_every=5", "train.eval_batches=1"], counts)
            assert_losses_close(self, name, got, want, STEPS, SINGLE_TOL)
            with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
                got_vals = [json.loads(line)["val_loss"] for line in f if "val_loss" in json.loads(line)]
            self.assertEqual(len(got_vals), 2)
            for g, w in zip(got_vals, vals):
                print(f"{name}: val_loss {g:.6f} vs reference {w:.6f}")
                self.assertLessEqual(abs(g - w), SINGLE_TOL * abs(w))

    def test_mismatched_data_is_refused_by_name(self):
        flat = os.path.join(self.tmp, "stream.bin")
        with open(flat, "wb") as f:
            f.write(bytes(range(200)) * 4)  # 400 uint16 tokens below the vocabulary.
        for sets, words in [([f"data.valid_path={flat}", "train.eval_every=5"],
                             f"data.valid_path: {flat} is not an SFT dataset but the training data is one"),
                            ([f"data.path={flat}", "data.packing=true"],
                             f"data.packing: {flat} is not an SFT dataset")]:
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

    def test_recomputation_and_zero3_match_transformers(self):
        # The last block's MLP and the head run on the trained rows only (Decoder::loss_rows): again in
        # activation checkpointing's recomputation, and under ZeRO-3's gathered units.
        self.check("recompute", ["train.activation_checkpointing=true"], SINGLE_TOL)
        self.check("zero3", ["parallel.dp=2", "parallel.zero_stage=3", "train.activation_checkpointing=true"],
                   PARALLEL_TOL)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
