"""Reward-model parity: `tessera run` with train.objective reward against TRL 0.24's own RewardTrainer on the
same transformers LlamaForSequenceClassification, pairs and order. The pairs are prepared by `tessera data
prepare --preference` and TRL is fed the same ids (prompt + completion) through its own
DataCollatorForPreference; each TRL step is RewardTrainer.compute_loss per micro-batch (its forward of the
chosen and rejected sequences, its scores at the last token that is not padding, its loss with the
margin and the centring term, its accuracy and margin metrics), the micro-batch losses averaged, with
AdamW, warmup + cosine LR and clipping as tessera's spec defines them. Per step: the loss and the reward
fields of steps.jsonl (rewards_chosen, rewards_rejected, rewards_margin, rewards_accuracy); after the
last step, every weight (the score head's too). In one process, dp=2, tp=2, pp=2 and ZeRO-3 with
offload, sp=2 (ring; all-to-all with tp=2); margins with the centring term; bf16; a resume; both kinds of transformers directory as
model.pretrained (a *ForSequenceClassification one's score head read, a causal LM's drawn); the export
loaded by transformers' AutoModelForSequenceClassification; `tessera score` against it. The test can fail: a score read at another
position than the last token, chosen and rejected split across dp ranks, a margin or centring term
dropped each give other numbers (the mutations in the note of issue 56)."""
import json
import re
import signal
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import datasets
import peft
import torch
import transformers
from trl import RewardConfig, RewardTrainer
from trl.trainer.reward_trainer import DataCollatorForPreference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
import hf_testing  # noqa: E402
import safetensors_io  # noqa: E402
from preference_testing import (GRID_LAYOUTS, LAYOUTS, MOE_LAYOUTS, mixtral_config, chatml_tokenizer, check_evaluations, pair_records, prepare_pairs,  # noqa: E402
                                run_example)
# SFT parity's tiny Llama (untied).
from sft_parity_test import EPS, FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, THETA, hf_llama  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
SEQ = 64
PAIRS, MICRO, GLOBAL, STEPS = 32, 2, 4, 8
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 5e-4, 5e-5, 2, 0.1, (0.9, 0.95), 1e-6, 1.0
CENTER = 0.05
# fp32 on both sides: the losses and the reward fields within 1e-5 (absolute, or relative where larger),
# the weights after the last step within 1e-5 (the bound); Adam's eps 1e-6 as in the DPO parity
# test (with 1e-8 an element whose gradient is near eps amplifies rounding).
TOL = 1e-5
# bf16 (parameters and activations; fp32 masters and loss) against TRL's fp32 run: each step's loss
# within 1e-2 (the bound).
BF16_TOL = 1e-2
FIELDS = ["rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy"]


def reward_llama(vocab, pad_token_id):
    """hf_llama's weights (seed 3) under LlamaForSequenceClassification with one label, its score head
    drawn normal(0, 0.02) from seed 5."""
    base = hf_llama(vocab)
    config = transformers.LlamaConfig(**base.config.to_dict())
    config.num_labels = 1
    config.pad_token_id = pad_token_id
    model = transformers.LlamaForSequenceClassification(config).float()
    model.model.load_state_dict(base.model.state_dict())
    with torch.no_grad():
        model.score.weight.copy_(torch.randn(model.score.weight.shape, generator=torch.Generator().manual_seed(5)) * 0.02)
    return model


def reward_qwen2(vocab, pad_token_id):
    """A tiny Qwen2ForSequenceClassification (q, k, v biases drawn non-zero; tied embeddings, as Qwen2's
    small models have: a reward model then has the token embedding alone), seed 9."""
    config = transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ, rms_norm_eps=1e-6,
        rope_theta=THETA, tie_word_embeddings=True, use_sliding_window=False, num_labels=1,
        pad_token_id=pad_token_id)
    torch.manual_seed(9)
    return hf_testing.with_random_biases(transformers.Qwen2ForSequenceClassification(config).float())


LORA_R, LORA_ALPHA = 4, 8.0
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_reward(adapter_dir):
    """reward_llama wrapped by peft's LoRA for a SEQ_CLS task (its score head trained whole beside the
    adapters: modules_to_save), A and B drawn (init_lora_weights=False: the initial model is not the
    base), saved into `adapter_dir` for tessera's model.lora.init_from."""
    def make(vocab, pad_token_id):
        model = reward_llama(vocab, pad_token_id)
        torch.manual_seed(4)
        config = peft.LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                 init_lora_weights=False, task_type="SEQ_CLS")
        model = peft.get_peft_model(model, config)
        model.save_pretrained(adapter_dir)
        return model
    return make


def peft_names(model, directory):
    """A peft model's trained tensors (adapters and score head) under tessera's names, as PEFT saves them."""
    model.save_pretrained(directory)
    saved = safetensors_io.load(os.path.join(directory, "adapter_model.safetensors"))
    return {"score.weight" if k == "base_model.model.score.weight" else k.removeprefix("base_model.model.model."): v
            for k, v in saved.items()}


def tessera_names(model):
    return {k.removeprefix("model."): v.detach().clone().contiguous() for k, v in model.state_dict().items()
            if not k.endswith("rotary_emb.inv_freq")}


def train_trl(tokenizer, pairs, vocab, tmp, margins=None, center=None, make=reward_llama, valid=None,
              valid_margins=None, eval_steps=(), eval_batches=0, evals=None, names=tessera_names):
    """TRL's reward model on `pairs` [(prompt, chosen, rejected) ids] as tessera's spec defines the step:
    micro-batches of MICRO pairs in file order, GLOBAL pairs a step. Returns (losses, the reward fields per
    step, final weights under tessera's names). With `valid` (pairs, and their margins), an evaluation
    after each step of `eval_steps` (1-based) into `evals` {step: (loss, fields)}: RewardTrainer's
    compute_loss in eval mode over micro-batches of MICRO validation pairs, global pair g being
    valid[g mod len(valid)], eval_batches global batches, averaged (all micro-batches alike)."""
    model = make(vocab, tokenizer.eos_token_id)
    args = RewardConfig(output_dir=os.path.join(tmp, "trl"), report_to=[], use_cpu=True, bf16=False,
                        gradient_checkpointing=False, max_length=None, center_rewards_coefficient=center)
    dataset = datasets.Dataset.from_list([{"chosen_input_ids": [1, 2], "rejected_input_ids": [1, 3]}])
    trainer = RewardTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    pad = model.config.pad_token_id
    for p, c, r in pairs:
        assert (p + c)[-1] != pad and (p + r)[-1] != pad, "a sequence ending with the pad token is scored earlier"
    collate = DataCollatorForPreference(pad_token_id=pad)
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() >= 2]
    no_decay = [p for p in trained if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
    losses, fields = [], []
    micro_batches = GLOBAL // MICRO

    def batch_of(source, source_margins, index):
        examples = [{"chosen_input_ids": source[i][0] + source[i][1], "rejected_input_ids": source[i][0] + source[i][2]}
                    for i in index]
        if source_margins is not None:
            for e, i in zip(examples, index):
                e["margin"] = source_margins[i]
        return collate(examples)

    def evaluate():
        count = eval_batches * GLOBAL // MICRO
        loss_sum, sums = 0.0, {k: 0.0 for k in FIELDS}
        model.eval()  # RewardTrainer records its metrics under "eval" then (no dropout: the same forward).
        with torch.no_grad():
            for m in range(count):
                index = [(m * MICRO + j) % len(valid) for j in range(MICRO)]
                loss, outputs = trainer.compute_loss(model, batch_of(valid, valid_margins, index), return_outputs=True)
                loss_sum += loss.item() / count
                chosen, rejected = outputs.logits.detach().squeeze(-1).double().chunk(2)
                sums["rewards_chosen"] += chosen.mean().item() / count
                sums["rewards_rejected"] += rejected.mean().item() / count
                sums["rewards_margin"] += trainer._metrics["eval"]["margin"][-1] / count
                sums["rewards_accuracy"] += trainer._metrics["eval"]["accuracy"][-1] / count
        model.train()
        return loss_sum, sums

    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = gpt_reference.lr_at(step, LR, MIN_LR, WARMUP, STEPS, True)
        opt.zero_grad(set_to_none=True)
        total, sums = 0.0, {k: 0.0 for k in FIELDS}
        for m in range(micro_batches):
            index = [(step * GLOBAL + m * MICRO + i) % len(pairs) for i in range(MICRO)]
            loss, outputs = trainer.compute_loss(model, batch_of(pairs, margins, index), return_outputs=True)
            (loss / micro_batches).backward()
            total += loss.item() / micro_batches
            chosen, rejected = outputs.logits.detach().squeeze(-1).double().chunk(2)
            sums["rewards_chosen"] += chosen.mean().item() / micro_batches
            sums["rewards_rejected"] += rejected.mean().item() / micro_batches
            # TRL's own metrics of this micro-batch.
            sums["rewards_margin"] += trainer._metrics["train"]["margin"][-1] / micro_batches
            sums["rewards_accuracy"] += trainer._metrics["train"]["accuracy"][-1] / micro_batches
        norm = float(torch.nn.utils.clip_grad_norm_(trained, CLIP))  # Before clipping, as steps.jsonl's.
        opt.step()
        losses.append(total)
        sums["grad_norm"] = norm
        fields.append(sums)
        if valid is not None and step + 1 in eval_steps:
            evals[step + 1] = evaluate()
    return losses, fields, names(model), model


def read_steps(out_dir):
    with open(os.path.join(out_dir, "steps.jsonl")) as f:
        return [json.loads(line) for line in f if "warning" not in line]


class RewardParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.tokenizer_dir, cls.hf_tokenizer = chatml_tokenizer(cls.tmp)
        cls.vocab = len(cls.hf_tokenizer)
        cls.data = os.path.join(cls.tmp, "pairs")
        cls.pairs = prepare_pairs(TESSERA, cls.tokenizer_dir, pair_records(PAIRS, seed=7), cls.data)
        records = pair_records(PAIRS, seed=8, margins=True)
        cls.margins = [r["margin"] for r in records]
        cls.margin_data = os.path.join(cls.tmp, "margin-pairs")
        cls.margin_pairs = prepare_pairs(TESSERA, cls.tokenizer_dir, records, cls.margin_data)
        assert max(len(p) + max(len(c), len(r)) for p, c, r in cls.pairs + cls.margin_pairs) <= SEQ
        cls.init_model = reward_llama(cls.vocab, cls.hf_tokenizer.eos_token_id)
        cls.init = os.path.join(cls.tmp, "init.safetensors")
        safetensors_io.save(cls.init, tessera_names(cls.init_model))
        cls.want = {}

    def reference(self, margins=False):
        if margins not in self.want:
            self.want[margins] = (train_trl(self.hf_tokenizer, self.margin_pairs, self.vocab, self.tmp,
                                            margins=self.margins, center=CENTER)
                                  if margins else train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp))
        return self.want[margins]

    def spec(self, name, steps=STEPS, every=0, data=None, model=None, reward_model=""):
        model = model or (f"family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS}, "
                          f"ffn_hidden: {FFN}, vocab: {self.vocab}, norm_eps: {EPS}, rope_theta: {THETA}, "
                          f"init_from: {self.init}")
        path = os.path.join(self.tmp, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"""name: {name}
model: {{{model}, seq_len: {SEQ}}}
data: {{path: {data or self.data}}}
train: {{objective: reward, steps: {steps}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}}}
{reward_model}
checkpoint: {{every_steps: {every}}}
output_dir: {self.tmp}/{name}
""")
        return path

    def run_tessera(self, name, sets, **kw):
        done = hf_testing.run_tessera(TESSERA, self.spec(name, **kw), sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return read_steps(os.path.join(self.tmp, name))

    def run_refused(self, name, sets, **kw):
        done = hf_testing.run_tessera(TESSERA, self.spec(name, **kw), sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertNotEqual(done.returncode, 0, done.stdout + done.stderr)
        return done.stdout + done.stderr

    def init_dir(self):
        """The initial reward model as a transformers directory."""
        directory = os.path.join(self.tmp, "seqcls")
        if not os.path.exists(directory):
            self.init_model.save_pretrained(directory)
        return directory

    def checkpoint(self, name):
        return os.path.join(self.tmp, name, "checkpoints", f"step_{STEPS:08d}")

    def check(self, name, steps, want, learns=True):
        losses, fields, weights, _ = want
        self.assertEqual([s["step"] for s in steps], list(range(1, STEPS + 1)))
        worst = 0.0
        for s, loss, f in zip(steps, losses, fields):
            for key, got, expect in [("loss", s["loss"], loss)] + [(k, s[k], f[k]) for k in FIELDS + ["grad_norm"]]:
                diff = abs(got - expect)
                worst = max(worst, diff)
                self.assertLessEqual(diff, TOL * max(1.0, abs(expect)),
                                     f"{name} step {s['step']} {key}: tessera {got} vs TRL {expect}")
        if learns:  # Each step reads other pairs: a short run's loss need not fall (Qwen2's does not).
            self.assertLess(losses[-1], losses[0], "the run learns")
        got = safetensors_io.load(os.path.join(self.checkpoint(name), "model.safetensors"))
        self.assertEqual(sorted(got), sorted(weights), f"{name}: the checkpoint's tensors")
        wdiff, wname = max((float((got[k].double() - v.double()).abs().max()), k) for k, v in weights.items())
        print(f"{name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, max difference {worst:.2e} in the step fields, "
              f"{wdiff:.2e} in the weights ({wname})")
        self.assertLessEqual(wdiff, TOL, f"{name}: the weights after step {STEPS}")

    def test_every_layout(self):
        want = self.reference()
        for name, sets in LAYOUTS:
            self.check(name, self.run_tessera(name, sets), want)

    def test_grid_tensor_parallel(self):
        # 2D, 2.5D and 3D, and 2D with a pipeline: each chunk's scores the sum over the grid's hidden
        # axis of its part of the hidden state times its part of score.weight.
        want = self.reference()
        for name, sets in GRID_LAYOUTS:
            self.check(name, self.run_tessera(name, sets), want)

    def test_validation(self):
        # Validation on the held-out tail (data.valid_fraction 0.25 of the pairs with margins: TRL's
        # eval_loss with margins and centring, eval_margin and eval_accuracy), every 4 steps, 3 global
        # batches (12 of the 8 pairs: wrapping), in one process, dp=2 with tp=2 and a 2D grid.
        evals = {}
        want = train_trl(self.hf_tokenizer, self.margin_pairs[:24], self.vocab, self.tmp, margins=self.margins[:24],
                         center=CENTER, valid=self.margin_pairs[24:], valid_margins=self.margins[24:],
                         eval_steps=(4, 8), eval_batches=3, evals=evals)
        sets = ["data.valid_fraction=0.25", "train.eval_every=4", "train.eval_batches=3"]
        for name, extra in [("valid_tail", []), ("valid_tail_dp2_tp2", ["parallel.dp=2", "parallel.tp=2"]),
                            ("valid_tail_2d", ["parallel.tp=4", "parallel.tp_mode=2d"])]:
            steps = self.run_tessera(name, sets + extra, data=self.margin_data,
                                     reward_model=f"reward_model: {{center_coefficient: {CENTER}}}")
            self.check(name, steps, want, learns=False)
            check_evaluations(self, name, steps, evals, FIELDS, TOL)

    def test_margins_and_centring(self):
        steps = self.run_tessera("margins", [], data=self.margin_data,
                                 reward_model=f"reward_model: {{center_coefficient: {CENTER}}}")
        self.check("margins", steps, self.reference(margins=True))

    def test_bf16_tracks_fp32(self):
        losses = self.reference()[0]
        got = [s["loss"] for s in self.run_tessera("bf16", ["train.precision=bf16"])]
        worst = max(abs(g - w) for g, w in zip(got, losses))
        print(f"bf16: max loss difference {worst:.2e} from TRL's fp32 run")
        self.assertLessEqual(worst, BF16_TOL)

    def test_resume(self):
        # A run with a checkpoint after step 4, its last checkpoint removed, run again: it resumes at step 4
        # and its steps 5-8 and final weights are the uninterrupted run's.
        self.run_tessera("resumed", [], every=STEPS // 2)
        shutil.rmtree(self.checkpoint("resumed"))
        steps = self.run_tessera("resumed", [], every=STEPS // 2)
        self.assertEqual(steps[STEPS // 2]["resumed_from"], STEPS // 2)
        self.check("resumed", steps, self.reference())

    def test_transformers_directories_in_and_out(self):
        # A LlamaForSequenceClassification directory as model.pretrained: its score head is read (the same
        # start as init_from, so the same run as TRL's).
        steps = self.run_tessera("from_seqcls", [], model=f"pretrained: {self.init_dir()}")
        want = self.reference()
        self.check("from_seqcls", steps, want)
        # Its export, loaded by transformers, scores as TRL's model after the same steps.
        out = os.path.join(self.tmp, "exported")
        done = subprocess.run([TESSERA, "export", self.checkpoint("from_seqcls"), out, "--pad-token-id",
                               str(self.hf_tokenizer.eos_token_id)], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("AutoModelForSequenceClassification", done.stdout)
        exported = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
        self.assertEqual(type(exported).__name__, "LlamaForSequenceClassification")
        self.assertEqual(exported.config.num_labels, 1)
        self.assertEqual(exported.config.pad_token_id, self.hf_tokenizer.eos_token_id)
        trl_model = want[3].eval()
        collate = DataCollatorForPreference(pad_token_id=self.hf_tokenizer.eos_token_id)
        batch = collate([{"chosen_input_ids": p + c, "rejected_input_ids": p + r} for p, c, r in self.pairs])
        with torch.no_grad():
            got = exported(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            expect = trl_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        diff = float((got - expect).abs().max())
        print(f"export: max score difference {diff:.2e} from TRL's model over {2 * PAIRS} sequences")
        self.assertLessEqual(diff, TOL)
        # `tessera score` of the checkpoint (the prepared pairs) and of the export (the JSONL, tokenized as
        # data prepare does) gives transformers' scores of the exported model.
        exported_scores = got.squeeze(-1).double()
        for model, data, extra in [(self.checkpoint("from_seqcls"), self.data, []),
                                   (out, self.data + ".jsonl", ["--tokenizer", self.tokenizer_dir, "--batch", "3"])]:
            done = subprocess.run([TESSERA, "score", model, "--data", data] + extra, capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            lines = [json.loads(line) for line in done.stdout.splitlines()]
            self.assertEqual([r["pair"] for r in lines], list(range(PAIRS)))
            scores = torch.tensor([r["chosen"] for r in lines] + [r["rejected"] for r in lines], dtype=torch.float64)
            diff = float((scores - exported_scores).abs().max())
            print(f"tessera score {os.path.basename(model)}: max difference {diff:.2e} from transformers' scores")
            self.assertLessEqual(diff, TOL)
            self.assertIn(f"scored {PAIRS} pairs", done.stderr)
        # Single completions (prompt + completion records, read from stdin), tokenized as a pair's chosen:
        # each pair's chosen, then each pair's rejected, score as transformers scores them.
        with open(self.data + ".jsonl") as f:
            records = [json.loads(line) for line in f if line.strip()]
        singles = "".join(json.dumps({"prompt": r["prompt"], "completion": r[side]}) + "\n"
                          for side in ("chosen", "rejected") for r in records)
        done = subprocess.run([TESSERA, "score", out, "--data", "-", "--tokenizer", self.tokenizer_dir, "--batch", "5"],
                              input=singles,
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        self.assertEqual([r["record"] for r in lines], list(range(2 * PAIRS)))
        diff = float((torch.tensor([r["score"] for r in lines], dtype=torch.float64) - exported_scores).abs().max())
        print(f"tessera score of single completions: max difference {diff:.2e} from transformers' scores")
        self.assertLessEqual(diff, TOL)
        self.assertIn(f"scored {2 * PAIRS} completions", done.stderr)
        # A causal LM directory as model.pretrained: its LM head dropped, the score head drawn; it trains.
        causal = os.path.join(self.tmp, "causal")
        hf_llama(self.vocab).save_pretrained(causal)
        steps = self.run_tessera("from_causal", [], model=f"pretrained: {causal}")
        self.assertLess(steps[-1]["loss"], steps[0]["loss"])
        head = safetensors_io.load(os.path.join(self.checkpoint("from_causal"), "model.safetensors"))
        self.assertEqual(list(head["score.weight"].shape), [1, HIDDEN])
        self.assertNotIn("lm_head.weight", head)

    def test_lora(self):
        # peft's LoRA of a SEQ_CLS task: the adapters and the score head (modules_to_save) train, the base is
        # frozen; tessera's model.lora with init_from the same adapter directory, in one process, tp=2 and pp=2.
        adapter = os.path.join(self.tmp, "lora-adapter")
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, make=lora_reward(adapter),
                         names=lambda m: peft_names(m, os.path.join(self.tmp, "lora-trl-final")))
        model = (f"family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS}, "
                 f"ffn_hidden: {FFN}, vocab: {self.vocab}, norm_eps: {EPS}, rope_theta: {THETA}, "
                 f"init_from: {self.init}, lora: {{rank: {LORA_R}, alpha: {LORA_ALPHA}, "
                 f"targets: [{', '.join(LORA_TARGETS)}], init_from: {adapter}}}")
        for name, sets in [("lora", []), ("lora_tp2", ["parallel.tp=2"]), ("lora_pp2", ["parallel.pp=2"])]:
            self.check(name, self.run_tessera(name, sets, model=model), want)
        # The export: PEFT's adapter directory over the base, and the merged transformers model, each
        # scoring as TRL's trained model.
        trl_model = want[3].eval()
        collate = DataCollatorForPreference(pad_token_id=self.hf_tokenizer.eos_token_id)
        batch = collate([{"chosen_input_ids": p + c, "rejected_input_ids": p + r} for p, c, r in self.pairs])
        with torch.no_grad():
            expect = trl_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        adapters_out, merged_out = os.path.join(self.tmp, "lora-peft"), os.path.join(self.tmp, "lora-merged")
        for out, extra in [(adapters_out, []),
                           (merged_out, ["--merge", "--pad-token-id", str(self.hf_tokenizer.eos_token_id)])]:
            done = subprocess.run([TESSERA, "export", self.checkpoint("lora"), out] + extra, capture_output=True,
                                  text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
        done = subprocess.run([TESSERA, "export", self.checkpoint("lora"), os.path.join(self.tmp, "lora-pad"),
                               "--pad-token-id", "0"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("--pad-token-id: a PEFT adapter directory", done.stderr)
        with open(os.path.join(adapters_out, "adapter_config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["task_type"], config["modules_to_save"]), ("SEQ_CLS", ["classifier", "score"]))
        for label, scorer in [("peft", lambda: peft.PeftModel.from_pretrained(reward_llama(
                                  self.vocab, self.hf_tokenizer.eos_token_id), adapters_out)),
                              ("merged", lambda: transformers.AutoModelForSequenceClassification.from_pretrained(
                                  merged_out))]:
            with torch.no_grad():
                got = scorer().eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            diff = float((got - expect).abs().max())
            print(f"lora export ({label}): max score difference {diff:.2e} from TRL's model")
            self.assertLessEqual(diff, TOL)
        # `tessera score` of the LoRA checkpoint (its adapters and head over the base it names).
        done = subprocess.run([TESSERA, "score", self.checkpoint("lora"), "--data", self.data], capture_output=True,
                              text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        scores = torch.tensor([r["chosen"] for r in lines] + [r["rejected"] for r in lines], dtype=torch.float64)
        diff = float((scores - expect.squeeze(-1).double()).abs().max())
        print(f"tessera score of the LoRA checkpoint: max difference {diff:.2e} from TRL's model")
        self.assertLessEqual(diff, TOL)
        # Adapters of a causal LM for a reward model are refused by name.
        causal_adapter = os.path.join(self.tmp, "causal-adapter")
        peft.get_peft_model(hf_llama(self.vocab), peft.LoraConfig(
            r=LORA_R, lora_alpha=LORA_ALPHA, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")).save_pretrained(
                causal_adapter)
        out = self.run_refused("lora_causal_adapter", [], model=model.replace(adapter, causal_adapter))
        self.assertIn("adapters without a score head", out)

    def test_mixture_of_experts(self):
        # A MixtralForSequenceClassification directory as model.pretrained (TRL's RewardTrainer adds no
        # balancing loss).
        directory = os.path.join(self.tmp, "mixtral")

        def reward_mixtral(vocab, pad_token_id):
            torch.manual_seed(11)
            return transformers.MixtralForSequenceClassification(
                mixtral_config(vocab, num_labels=1, pad_token_id=pad_token_id)).float()
        reward_mixtral(self.vocab, self.hf_tokenizer.eos_token_id).save_pretrained(directory)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, make=reward_mixtral)
        for name, sets in MOE_LAYOUTS:
            self.check(name, self.run_tessera(name, sets, model=f"pretrained: {directory}"), want, learns=False)

    def test_qwen2(self):
        # A Qwen2ForSequenceClassification directory (biases, tied embeddings) as model.pretrained, in one
        # process and tp=2.
        directory = os.path.join(self.tmp, "qwen2")
        reward_qwen2(self.vocab, self.hf_tokenizer.eos_token_id).save_pretrained(directory)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, make=reward_qwen2)
        for name, sets in [("qwen2", []), ("qwen2_tp2", ["parallel.tp=2"])]:
            self.check(name, self.run_tessera(name, sets, model=f"pretrained: {directory}"), want, learns=False)

    def test_bad_input_is_refused_by_name(self):
        # A pair longer than seq_len (a reward model scores the last token as an input).
        out = self.run_refused("too_long", ["model.seq_len=16", "parallel.dp=2"])
        self.assertRegex(out, r"pair \d+ has \d+ prompt and \d+ (chosen|rejected) tokens, more than model.seq_len = 16")
        out = self.run_refused("center_elsewhere", ["train.objective=cross_entropy",
                                                    "reward_model.center_coefficient=0.1"])
        self.assertIn("reward_model.center_coefficient: applies to train.objective reward only", out)
        out = self.run_refused("negative_center", ["reward_model.center_coefficient=-1"])
        self.assertIn("reward_model.center_coefficient", out)
        # `tessera score` of a model that is no reward model, and of a bad line.
        causal = os.path.join(self.tmp, "causal-for-score")
        hf_llama(self.vocab).save_pretrained(causal)
        done = subprocess.run([TESSERA, "score", causal, "--data", self.data], capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("is not a reward model", done.stderr)
        bad = os.path.join(self.tmp, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "chosen": "b"}\n')
        done = subprocess.run([TESSERA, "score", self.init_dir(), "--data", bad, "--tokenizer", self.tokenizer_dir],
                              capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("bad.jsonl:2", done.stderr)
        # Empty standard input; a single completion among pairs.
        done = subprocess.run([TESSERA, "score", self.init_dir(), "--data", "-", "--tokenizer", self.tokenizer_dir],
                              input="", capture_output=True, text=True)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("error: <stdin>: holds no pairs", done.stderr)
        with open(bad, "w") as f:
            f.write('{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "completion": "b"}\n')
        done = subprocess.run([TESSERA, "score", self.init_dir(), "--data", "-", "--tokenizer", self.tokenizer_dir],
                              input=open(bad).read(), capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("<stdin>:2: completion: a pair has chosen and rejected", done.stderr)
        # Single completions: a pair among them, a record without its completion, an empty completion.
        for second, problem in [('{"prompt": "a", "completion": "b", "chosen": "c"}', "chosen: a record of single"),
                                ('{"prompt": "a", "chosen": "b", "rejected": "c"}', "chosen: a record of single"),
                                ('{"prompt": "a"}', "completion: is missing"),
                                ('{"prompt": "a", "completion": ""}', "completion: has no tokens")]:
            with open(bad, "w") as f:
                f.write('{"prompt": "a", "completion": "b"}\n' + second + "\n")
            done = subprocess.run([TESSERA, "score", self.init_dir(), "--data", bad, "--tokenizer", self.tokenizer_dir],
                                  capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("bad.jsonl:2: " + problem, done.stderr)

    def test_a_reward_model_is_no_language_model(self):
        # Review findings: a reward model's directory or checkpoint given where a language model is
        # trained is refused naming it, not by a missing tensor; the dpo: section outside dpo; LoRA dropout.
        out = self.run_refused("dpo_from_seqcls", ["train.objective=dpo"], model=f"pretrained: {self.init_dir()}")
        self.assertIn(f"model.pretrained: {self.init_dir()} is a reward model", out)
        self.assertIn("train.objective dpo needs a causal LM", out)
        self.run_tessera("then_dpo", [], steps=2, every=2)
        out = self.run_refused("then_dpo", ["train.objective=dpo", "train.steps=3"], steps=2, every=2)
        self.assertRegex(out, r"checkpoint \S+step_00000002 is a reward model \(a score head\), this job trains a "
                              r"language model")
        out = self.run_refused("dpo_fields", ["dpo.beta=0.5", "dpo.loss_type=ipo"])
        self.assertIn("dpo.beta: applies to train.objective dpo only", out)
        self.assertIn("dpo.loss_type: applies to train.objective dpo only", out)
        out = self.run_refused("lora_dropout", ["model.lora.rank=4", "model.lora.dropout=0.1"])
        self.assertIn("model.lora.dropout: 0.1: with train.objective reward trains without dropout", out)
        # A model of a smaller vocabulary than the tokenizer's: the pair and the input named, not the
        # temporary dataset's file.
        small = os.path.join(self.tmp, "small-vocab")
        small_vocab = max(max(p + c + r) for p, c, r in self.pairs)
        if not os.path.exists(small):
            reward_llama(small_vocab, self.hf_tokenizer.eos_token_id).save_pretrained(small)
        pairs = os.path.join(self.tmp, "score-pairs.jsonl")
        with open(pairs, "w") as f:
            for r in pair_records(PAIRS, seed=7):  # self.pairs, whose largest id is then outside.
                f.write(json.dumps(r) + "\n")
        done = subprocess.run([TESSERA, "score", small, "--data", pairs, "--tokenizer", self.tokenizer_dir],
                              capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertRegex(done.stderr, rf"--data: {re.escape(pairs)}: pair \d+'s (prompt|chosen|rejected): token \d+ "
                                      rf"at position \d+ is outside the model's vocabulary \({small_vocab}\): "
                                      "prepared with another tokenizer")
        self.assertNotIn("tessera-score-", done.stderr)

    def test_score_leaves_no_temporary_directory(self):
        # Review finding: its reader gone (SIGPIPE) or the program interrupted, tessera score's temporary
        # directory (the stdin copy, the prepared pairs) is removed all the same.
        scratch = tempfile.mkdtemp(dir=self.tmp)
        env = dict(os.environ, TMPDIR=scratch)
        pairs = os.path.join(self.tmp, "many-pairs.jsonl")
        with open(pairs, "w") as f:
            for r in pair_records(PAIRS, seed=7):
                f.write(json.dumps(r) + "\n")
        reader = subprocess.Popen([TESSERA, "score", self.init_dir(), "--data", pairs, "--tokenizer",
                                   self.tokenizer_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        reader.stdout.close()  # Its reader is gone before the first score is written.
        _, err = reader.communicate(timeout=120)
        self.assertNotEqual(reader.returncode, 0, err)
        self.assertEqual(os.listdir(scratch), [], "a closed stdout")
        interrupted = subprocess.Popen([TESSERA, "score", self.init_dir(), "--data", "-", "--tokenizer",
                                        self.tokenizer_dir], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, env=env)
        interrupted.stdin.write(open(pairs, "rb").read())
        interrupted.stdin.flush()  # Left open: the program is copying its standard input.
        deadline = time.time() + 60
        while not any(os.scandir(scratch)) and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(len(os.listdir(scratch)), 1, "the temporary directory while standard input is copied")
        interrupted.send_signal(signal.SIGINT)
        interrupted.wait(timeout=120)
        interrupted.stdin.close()
        self.assertEqual(interrupted.returncode, -signal.SIGINT)
        self.assertEqual(os.listdir(scratch), [], "SIGINT")

    def test_the_example_prepares_trains_and_scores(self):
        # examples/reward-llama.yaml as its comment says, for a few steps, from a few steps of the SFT example.
        steps, reward_out = run_example(self, TESSERA, RANK, self.tmp, "reward", "examples/reward-llama.yaml")
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "reward-pairs.pref.margin")), "the example's margins")
        for s in steps:
            for k in FIELDS:
                self.assertIn(k, s)
            self.assertEqual(s["tokens"], 2 * 16 * 64)  # Two sequences per pair.
        done = subprocess.run([TESSERA, "score", os.path.join(reward_out, "checkpoints"), "--data",
                               "examples/reward/pairs.jsonl", "--tokenizer", "examples/sft"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(done.stdout.splitlines()), 300)
        self.assertIn("scored 300 pairs", done.stderr)


if __name__ == "__main__":
    unittest.main()
