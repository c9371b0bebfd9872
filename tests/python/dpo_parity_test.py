"""DPO parity: `tessera run` with train.objective dpo against TRL 0.24's own DPOTrainer on the same
transformers Llama, pairs and order. The pairs are prepared by `tessera data prepare --preference`
(its ids equal TRL's tokenize_row: preference_data_test.py) and TRL is fed the same ids through its own
DataCollatorForPreference; each TRL step is DPOTrainer.get_batch_loss_metrics per micro-batch (its
concatenated_forward, its reference pass through a frozen copy of the initial model, its dpo_loss and
metrics), the micro-batch losses averaged, with AdamW, warmup + cosine LR and clipping as tessera's
spec defines them. Per step: the loss and the six reward fields of steps.jsonl (rewards_chosen,
rewards_rejected, rewards_margin, rewards_accuracy, logps_chosen, logps_rejected); after the last
step, every weight. In one process, dp=2, tp=2, pp=2, sp=2 (ring; all-to-all with tp=2) and ZeRO-3 with
offload; ipo (also with sp=2), label smoothing and TRL's precomputed reference in one process; a resume from a checkpoint half way;
shuffled pairs (TRL fed the documented permutation) and dpo.reference from a transformers directory (also
under tp=2 and pp=2) or a tessera checkpoint (TRL's ref_model). The test can fail: the reference updated with the
policy, prompt tokens counted in the log-probabilities, or per-token means instead of sums each give
other numbers (the mutations in the note of issue 56)."""
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

import datasets
import peft
import torch
import transformers
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_reference  # noqa: E402
import gpt_reference  # noqa: E402
import hf_testing  # noqa: E402
import safetensors_io  # noqa: E402
from preference_testing import (GRID_LAYOUTS, LAYOUTS, MOE_LAYOUTS, mixtral_config, chatml_tokenizer, check_evaluations, pair_records, prepare_pairs,  # noqa: E402
                                run_example)

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
# SFT parity's tiny Llama (hf_llama: seed 3, untied), with longer samples (rotary positions: its
# max_position_embeddings changes nothing).
from sft_parity_test import EPS, FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, THETA, hf_llama  # noqa: E402
SEQ = 64
PAIRS, MICRO, GLOBAL, STEPS = 32, 2, 4, 8
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 2e-3, 2e-4, 2, 0.1, (0.9, 0.95), 1e-6, 1.0
METRICS = {"rewards_chosen": "rewards/chosen", "rewards_rejected": "rewards/rejected",
           "rewards_margin": "rewards/margins", "rewards_accuracy": "rewards/accuracies",
           "logps_chosen": "logps/chosen", "logps_rejected": "logps/rejected"}
# fp32 on both sides: the losses and the reward fields within 1e-5 (absolute, or relative where
# larger), the weights after the last step within 1e-5 (the bound). Adam's eps is 1e-6: with
# 1e-8, TRL's own fp32 run ends 8.2e-6 from its fp64 run in one weight (an element whose gradient is
# near eps, where Adam's update amplifies rounding), so the bound would test rounding; with 1e-6 every
# layout ends within 1.6e-6 of TRL (measured).
TOL = 1e-5
LORA_R, LORA_ALPHA = 4, 8.0
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# bf16 (parameters and activations; fp32 masters and loss) against TRL's fp32 run: each step's loss
# within 1e-2 (the bound).
BF16_TOL = 1e-2

def lora_llama(vocab, adapter_dir):
    """The model wrapped by peft's LoRA with A and B drawn (init_lora_weights=False: the initial policy is
    not the base), its adapter saved into `adapter_dir` for tessera's model.lora.init_from."""
    torch.manual_seed(4)
    config = peft.LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS,
                             init_lora_weights=False, task_type="CAUSAL_LM")
    model = peft.get_peft_model(hf_llama(vocab), config)
    model.save_pretrained(adapter_dir)
    return model


def adapter_weights(model, directory):
    """A peft model's adapters under tessera's names (its checkpoint's under LoRA)."""
    model.save_pretrained(directory)
    saved = safetensors_io.load(os.path.join(directory, "adapter_model.safetensors"))
    return {k.removeprefix("base_model.model.model."): v for k, v in saved.items()}


def qwen2_lm(vocab):
    """A tiny Qwen2ForCausalLM (q, k, v biases drawn non-zero; tied embeddings, as Qwen2's small models), seed 9."""
    config = transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ, rms_norm_eps=1e-6,
        rope_theta=THETA, tie_word_embeddings=True, use_sliding_window=False)
    torch.manual_seed(9)
    return hf_testing.with_random_biases(transformers.Qwen2ForCausalLM(config).float())


def train_trl(tokenizer, pairs, vocab, tmp, loss_type="sigmoid", beta=0.1, label_smoothing=0.0, lora_adapter=None,
              make=hf_llama, precompute=False, order=None, ref_model=None, valid=None, eval_steps=(), eval_batches=0,
              metric_names=METRICS):
    """TRL's DPO on `pairs` [(prompt, chosen, rejected) ids] as tessera's spec defines the step: micro-batches
    of MICRO pairs, GLOBAL pairs a step, global pair g being pairs[order(g)] (default: file order, wrapping).
    With `lora_adapter` (a directory), peft's LoRA (lora_llama) and no reference model: TRL's reference is
    then the base, the adapters disabled. `ref_model`: TRL's ref_model (default: a frozen copy of the
    initial model). With `valid` (pairs), an evaluation after each step of `eval_steps` (1-based): TRL's
    get_batch_loss_metrics(train_eval="eval") over micro-batches of MICRO validation pairs, global pair g
    being valid[g mod len(valid)], eval_batches global batches, averaged (all micro-batches alike).
    `metric_names`: steps.jsonl's field → TRL's metric, per step.
    Returns (losses, metrics per step, final weights: the adapters' under LoRA), and with `valid` also
    {step: (eval loss, {metric: value})}."""
    order = order or (lambda g: g % len(pairs))
    if lora_adapter:
        model, ref = lora_llama(vocab, lora_adapter), None
    else:
        model = make(vocab)
        ref = (ref_model if ref_model is not None else copy.deepcopy(model)).eval()
    args = DPOConfig(output_dir=os.path.join(tmp, "trl"), beta=beta, loss_type=loss_type,
                     label_smoothing=label_smoothing, report_to=[], use_cpu=True, padding_value=0,
                     max_length=None, max_prompt_length=None, max_completion_length=None,
                     precompute_ref_log_probs=precompute,
                     bf16=False)  # transformers' default on a CPU with bf16 runs the reference under autocast.
    dataset = datasets.Dataset.from_list([{"prompt": "a", "chosen": "b", "rejected": "c"}])
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer)
    collate = DataCollatorForPreference(pad_token_id=0)
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() >= 2]
    no_decay = [p for p in trained if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
    micro_batches = GLOBAL // MICRO

    def micro_batch(step, m):
        return [order(step * GLOBAL + m * MICRO + i) for i in range(MICRO)]

    reference = {}
    if precompute:
        # TRL's precompute_ref_log_probs: its compute_ref_log_probs over every pair before the first step
        # (the initial weights), kept as float32 as its dataset column keeps them, then read with the batches.
        for step in range(STEPS):
            for m in range(micro_batches):
                index = micro_batch(step, m)
                batch = collate([{"prompt_input_ids": pairs[i][0], "chosen_input_ids": pairs[i][1],
                                  "rejected_input_ids": pairs[i][2]} for i in index])
                with torch.no_grad():
                    chosen, rejected = trainer.compute_ref_log_probs(batch)
                for i, c, r in zip(index, chosen.float().tolist(), rejected.float().tolist()):
                    reference.setdefault(i, (c, r))
    losses, metrics, evals = [], [], {}
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = gpt_reference.lr_at(step, LR, MIN_LR, WARMUP, STEPS, True)
        opt.zero_grad(set_to_none=True)
        total, sums = 0.0, {k: 0.0 for k in metric_names}
        for m in range(micro_batches):
            examples = [{"prompt_input_ids": pairs[i][0], "chosen_input_ids": pairs[i][1],
                         "rejected_input_ids": pairs[i][2]} for i in micro_batch(step, m)]
            if precompute:
                for e, i in zip(examples, micro_batch(step, m)):
                    e["ref_chosen_logps"], e["ref_rejected_logps"] = reference[i]
            batch = collate(examples)
            loss, got = trainer.get_batch_loss_metrics(model, batch, train_eval="train")
            (loss / micro_batches).backward()
            total += loss.item() / micro_batches
            for k, name in metric_names.items():
                sums[k] += got[name] / micro_batches
        norm = float(torch.nn.utils.clip_grad_norm_(trained, CLIP))  # Before clipping, as steps.jsonl's.
        opt.step()
        losses.append(total)
        sums["grad_norm"] = norm
        metrics.append(sums)
        if valid is not None and step + 1 in eval_steps:
            count = eval_batches * GLOBAL // MICRO
            loss_sum, got_sums = 0.0, {k: 0.0 for k in METRICS}
            with torch.no_grad():
                for m in range(count):
                    batch = collate([{"prompt_input_ids": valid[i][0], "chosen_input_ids": valid[i][1],
                                      "rejected_input_ids": valid[i][2]}
                                     for i in [(m * MICRO + j) % len(valid) for j in range(MICRO)]])
                    loss, got = trainer.get_batch_loss_metrics(model, batch, train_eval="eval")
                    loss_sum += loss.item() / count
                    for k, name in METRICS.items():
                        got_sums[k] += got[f"eval_{name}"] / count
            evals[step + 1] = (loss_sum, got_sums)
    if valid is not None:
        return losses, metrics, None, evals
    if lora_adapter:
        return losses, metrics, adapter_weights(model, os.path.join(tmp, "trl-adapters"))
    tied = model.config.tie_word_embeddings  # lm_head.weight is then the token embedding (not in checkpoints).
    weights = {k.removeprefix("model."): v.detach().clone() for k, v in model.state_dict().items()
               if not k.endswith("rotary_emb.inv_freq") and not (tied and k == "lm_head.weight")}
    return losses, metrics, weights


class DpoParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.tokenizer_dir, cls.hf_tokenizer = chatml_tokenizer(cls.tmp)
        cls.vocab = len(cls.hf_tokenizer)
        cls.data = os.path.join(cls.tmp, "pairs")
        cls.pairs = prepare_pairs(TESSERA, cls.tokenizer_dir, pair_records(PAIRS, seed=7), cls.data)
        assert max(len(p) + max(len(c), len(r)) for p, c, r in cls.pairs) <= SEQ + 1
        state = hf_llama(cls.vocab).state_dict()
        cls.init = os.path.join(cls.tmp, "init.safetensors")
        safetensors_io.save(cls.init, {k.removeprefix("model."): v.contiguous() for k, v in state.items()
                                       if not k.endswith("rotary_emb.inv_freq")})
        cls.want = {}

    def reference(self, loss_type="sigmoid", label_smoothing=0.0):
        key = (loss_type, label_smoothing)
        if key not in self.want:
            self.want[key] = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, loss_type=loss_type,
                                       label_smoothing=label_smoothing)
        return self.want[key]

    def run_tessera(self, name, sets, dpo="{beta: 0.1}", steps=STEPS, every=0, lora="", model=None):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        model = model or (f"family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS}, "
                          f"ffn_hidden: {FFN}, vocab: {self.vocab}, norm_eps: {EPS}, rope_theta: {THETA}, "
                          f"init_from: {self.init}{lora}")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{{model}, seq_len: {SEQ}}}
data: {{path: {self.data}}}
train: {{objective: dpo, steps: {steps}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}}}
dpo: {dpo}
checkpoint: {{every_steps: {every}}}
output_dir: {self.tmp}/{name}
""")
        done = hf_testing.run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            return [json.loads(line) for line in f if "warning" not in line]

    def final_weights(self, name):
        ckpt = os.path.join(self.tmp, name, "checkpoints", f"step_{STEPS:08d}", "model.safetensors")
        return safetensors_io.load(ckpt)

    def check(self, name, steps, want, weights_of=None, learns=True):
        losses, metrics, weights = want
        self.assertEqual([s["step"] for s in steps], list(range(1, STEPS + 1)))
        worst = 0.0
        for s, loss, m in zip(steps, losses, metrics):
            for key, got, expect in [("loss", s["loss"], loss)] + [(k, s[k], m[k]) for k in m]:
                diff = abs(got - expect)
                worst = max(worst, diff)
                self.assertLessEqual(diff, TOL * max(1.0, abs(expect)),
                                     f"{name} step {s['step']} {key}: tessera {got} vs TRL {expect}")
        if learns:  # Each step reads other pairs: a short run's loss need not fall.
            self.assertLess(losses[-1], losses[0], "the run learns")
        got = self.final_weights(weights_of or name)
        wdiff, wname = max((float((got[k].double() - v.double()).abs().max()), k) for k, v in weights.items())
        print(f"{name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, max difference {worst:.2e} in the step fields, "
              f"{wdiff:.2e} in the weights ({wname})")
        self.assertLessEqual(wdiff, TOL, f"{name}: the weights after step {STEPS}")

    def test_sigmoid_in_every_layout(self):
        want = self.reference()
        for name, sets in LAYOUTS:
            self.check(name, self.run_tessera(name, sets), want)

    def test_grid_tensor_parallel(self):
        # 2D, 2.5D and 3D, and 2D with a pipeline: each chunk's pairs' log-probabilities from the
        # vocabulary-parallel loss over the grid's hidden axis, the loss the mean over the chunks.
        want = self.reference()
        for name, sets in GRID_LAYOUTS:
            self.check(name, self.run_tessera(name, sets), want)

    def test_mixture_of_experts(self):
        # A MixtralForCausalLM directory as model.pretrained (TRL's default: no balancing loss).
        directory = os.path.join(self.tmp, "mixtral")

        def mixtral_lm(vocab):
            torch.manual_seed(11)
            return transformers.MixtralForCausalLM(mixtral_config(vocab)).float()
        mixtral_lm(self.vocab).save_pretrained(directory)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, make=mixtral_lm)
        for name, sets in MOE_LAYOUTS:
            self.check(name, self.run_tessera(name, sets, model=f"pretrained: {directory}"), want, learns=False)

    def test_mixture_of_experts_balancing_loss(self):
        # A Mixtral directory with output_router_logits true and router_aux_loss_coef 0.1: TRL's DPOTrainer
        # adds the balancing loss over each micro-batch's pair rows, their padding left out by the attention
        # mask (transformers' load_balancing_loss_func), and so does tessera (the coefficient read from
        # config.json). aux_loss is compared per step; counting the padding fails it (the rows here are
        # padded to seq_len, TRL's to the micro-batch's longest). With sp each rank counts its sequence
        # block's tokens, with the 2D grid its chunk of the pairs'.
        directory = os.path.join(self.tmp, "mixtral-balanced")

        def mixtral_lm(vocab):
            torch.manual_seed(11)
            config = mixtral_config(vocab, output_router_logits=True, router_aux_loss_coef=0.1)
            return transformers.MixtralForCausalLM(config).float()
        mixtral_lm(self.vocab).save_pretrained(directory)
        # Every pair within seq_len: a pair of seq_len + 1 tokens would route its last token in TRL, which
        # tessera reads only as a target (docs/post-training.md).
        self.assertLessEqual(max(len(p) + max(len(c), len(r)) for p, c, r in self.pairs), SEQ)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, make=mixtral_lm,
                         metric_names=dict(METRICS, aux_loss="aux_loss"))
        self.assertGreater(want[1][0]["aux_loss"], 0.5, "the balancing loss is on")
        layouts = MOE_LAYOUTS + [("moe_sp2", ["parallel.sp=2"]), ("moe_grid_2d", ["parallel.tp=4", "parallel.tp_mode=2d"])]
        for name, sets in layouts:
            self.check(name + "_balanced", self.run_tessera(name + "_balanced", sets, model=f"pretrained: {directory}"),
                       want, learns=False)

    def test_qwen2(self):
        # A Qwen2ForCausalLM directory (biases, tied embeddings) as model.pretrained, in one process and tp=2.
        directory = os.path.join(self.tmp, "qwen2")
        qwen2_lm(self.vocab).save_pretrained(directory)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, make=qwen2_lm)
        for name, sets in [("qwen2", []), ("qwen2_tp2", ["parallel.tp=2"])]:
            self.check(name, self.run_tessera(name, sets, model=f"pretrained: {directory}"), want, learns=False)

    def test_lora_reference_is_the_base(self):
        # peft's LoRA with drawn adapters (so the initial policy is not the base): TRL's reference is the
        # base with the adapters disabled, and so is tessera's (model.lora.init_from: the same adapters).
        adapter = os.path.join(self.tmp, "lora-adapter")
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, lora_adapter=adapter)
        lora = (f",\n        lora: {{rank: {LORA_R}, alpha: {LORA_ALPHA}, targets: [{', '.join(LORA_TARGETS)}], "
                f"init_from: {adapter}}}")
        steps = self.run_tessera("lora", [], lora=lora)
        self.assertGreater(abs(steps[0]["rewards_margin"]), 1e-3, "step 1: the policy is not the reference")
        self.check("lora", steps, want)
        self.check("lora_tp2", self.run_tessera("lora_tp2", ["parallel.tp=2"], lora=lora), want)

    def test_bf16_tracks_fp32(self):
        losses = self.reference()[0]
        got = [s["loss"] for s in self.run_tessera("bf16", ["train.precision=bf16"])]
        worst = max(abs(g - w) for g, w in zip(got, losses))
        print(f"bf16: max loss difference {worst:.2e} from TRL's fp32 run")
        self.assertLessEqual(worst, BF16_TOL)

    def test_ipo_and_label_smoothing(self):
        self.check("ipo", self.run_tessera("ipo", [], dpo="{beta: 0.1, loss_type: ipo}"), self.reference("ipo"))
        # Per-token means under sp: the counts of a sample's targets summed over its sequence blocks too.
        self.check("ipo_sp2", self.run_tessera("ipo_sp2", ["parallel.sp=2"], dpo="{beta: 0.1, loss_type: ipo}"),
                   self.reference("ipo"))
        self.check("smoothed", self.run_tessera("smoothed", [], dpo="{beta: 0.1, label_smoothing: 0.2}"),
                   self.reference("sigmoid", 0.2))

    def test_shuffled_pairs(self):
        # data.shuffle: global pair g is pair P_e[g mod N] of epoch e = g div N, P_e the documented
        # SplitMix64 permutation with seed data.seed + e (docs/data-format.md, as SFT samples). 20 pairs
        # and 32 read: epoch 1 starts at step 6. TRL is fed that order; each row reads other pairs.
        data = os.path.join(self.tmp, "pairs20")
        pairs = prepare_pairs(TESSERA, self.tokenizer_dir, pair_records(20, seed=7), data)
        seed = 11
        order = lambda g: data_reference.splitmix_permutation(len(pairs), seed + g // len(pairs))[g % len(pairs)]
        self.assertNotEqual([order(g) for g in range(32)], [g % 20 for g in range(32)])
        want = train_trl(self.hf_tokenizer, pairs, self.vocab, self.tmp, order=order)
        for name, sets in [("shuffled", []), ("shuffled_dp2", ["parallel.dp=2"])]:
            sets = sets + [f"data.path={data}", "data.shuffle=true", f"data.seed={seed}"]
            self.check(name, self.run_tessera(name, sets), want, learns=False)

    def test_reference_from_a_directory_or_a_checkpoint(self):
        # dpo.reference PATH: TRL's ref_model. (1) A transformers directory (the initial Llama with every
        # weight moved by noise, so it is not the policy), in one process, tp=2 and pp=2: each rank's
        # reference model holds its own part. (2) A tessera checkpoint (another run's last step).
        perturbed = hf_llama(self.vocab)
        gen = torch.Generator().manual_seed(21)
        with torch.no_grad():
            for p in perturbed.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        directory = os.path.join(self.tmp, "reference-llama")
        perturbed.save_pretrained(directory)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, ref_model=perturbed)
        for name, sets in [("ref_dir", []), ("ref_dir_tp2", ["parallel.tp=2"]), ("ref_dir_pp2", ["parallel.pp=2"])]:
            steps = self.run_tessera(name, sets, dpo=f"{{beta: 0.1, reference: {directory}}}")
            self.assertGreater(abs(steps[0]["rewards_margin"]), 1e-3, "step 1: the policy is not the reference")
            self.check(name, steps, want, learns=False)
        self.run_tessera("ref_source", [], steps=2)
        checkpoint = os.path.join(self.tmp, "ref_source", "checkpoints")
        saved = safetensors_io.load(os.path.join(checkpoint, "step_00000002", "model.safetensors"))
        from_checkpoint = hf_llama(self.vocab)
        missing, unexpected = from_checkpoint.load_state_dict(
            {("lm_head.weight" if k == "lm_head.weight" else f"model.{k}"): v for k, v in saved.items()}, strict=False)
        self.assertEqual(([m for m in missing if not m.endswith("inv_freq")], unexpected), ([], []))
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, ref_model=from_checkpoint)
        self.check("ref_checkpoint", self.run_tessera("ref_checkpoint", [], dpo=f"{{beta: 0.1, reference: {checkpoint}}}"),
                   want, learns=False)

    def test_validation(self):
        # Validation on pairs (TRL's evaluate: eval_loss and eval_rewards/…, with its reference model): the
        # held-out tail (data.valid_fraction 0.25: the last 8 of 32 pairs, training on 24 and wrapping),
        # every 4 steps, 3 global batches (12 pairs: the 8 wrap) — in one process, pp=2 and dp=2 with
        # sp=2; and data.valid_path (another file) with dp=2. Then a resume at step 4 evaluates at step 8
        # with the validation reference kept in the checkpoint (valid_logps).
        want = train_trl(self.hf_tokenizer, self.pairs[:24], self.vocab, self.tmp, valid=self.pairs[24:],
                         eval_steps=(4, 8), eval_batches=3)
        sets = ["data.valid_fraction=0.25", "train.eval_every=4", "train.eval_batches=3"]
        for name, extra in [("valid_tail", []), ("valid_tail_pp2", ["parallel.pp=2"]),
                            ("valid_tail_dp2_sp2", ["parallel.dp=2", "parallel.sp=2"])]:
            self.check_evaluations(name, self.run_tessera(name, sets + extra, every=4), want)
        shutil.rmtree(os.path.join(self.tmp, "valid_tail", "checkpoints", f"step_{STEPS:08d}"))
        steps = self.run_tessera("valid_tail", sets, every=4)
        self.assertEqual(steps[STEPS // 2]["resumed_from"], STEPS // 2)
        self.check_evaluations("valid_tail (resumed)", steps, want)
        data = os.path.join(self.tmp, "valid20")
        valid = prepare_pairs(TESSERA, self.tokenizer_dir, pair_records(20, seed=8), data)
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, valid=valid, eval_steps=(8,),
                         eval_batches=2)
        self.check_evaluations("valid_path_dp2", self.run_tessera(
            "valid_path_dp2", [f"data.valid_path={data}", "train.eval_batches=2", "parallel.dp=2"]), want)

    def check_evaluations(self, name, steps, want):
        """Every step's loss and reward fields (the training pairs) and each evaluation against TRL's."""
        losses, metrics, _, evals = want
        self.assertEqual([s["step"] for s in steps], list(range(1, STEPS + 1)))
        for s, loss, m in zip(steps, losses, metrics):
            for key in ["loss"] + list(METRICS):
                expect = loss if key == "loss" else m[key]
                self.assertLessEqual(abs(s[key] - expect), TOL * max(1.0, abs(expect)), f"{name} step {s['step']} {key}")
        check_evaluations(self, name, steps, evals, METRICS, TOL)

    def test_precomputed_reference(self):
        # TRL's precompute_ref_log_probs (the reference scored before training, float32) against
        # dpo.precompute_reference: true — tessera scores it before the first step either way.
        want = train_trl(self.hf_tokenizer, self.pairs, self.vocab, self.tmp, precompute=True)
        self.check("precomputed", self.run_tessera("precomputed", [], dpo="{beta: 0.1, precompute_reference: true}"),
                   want)

    def test_resume_keeps_the_reference(self):
        # A run with a checkpoint after step 4, its last checkpoint removed, run again: it resumes at step
        # 4 with the reference log-probabilities from the checkpoint (the initial weights are gone), and
        # its steps 5-8 and final weights are the uninterrupted run's.
        self.run_tessera("resumed", [], every=STEPS // 2)
        shutil.rmtree(os.path.join(self.tmp, "resumed", "checkpoints", f"step_{STEPS:08d}"))
        steps = self.run_tessera("resumed", [], every=STEPS // 2)
        self.assertEqual(steps[STEPS // 2]["resumed_from"], STEPS // 2)
        self.check("resumed", steps, self.reference())
    def run_refused(self, name, sets, dpo="{beta: 0.1}", steps=STEPS, every=0):
        """`tessera run` that must fail: its output."""
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {self.vocab}, seq_len: {SEQ}, init_from: {self.init}}}
data: {{path: {self.data}}}
train: {{objective: dpo, steps: {steps}, micro_batch: {MICRO}, global_batch: {GLOBAL}}}
dpo: {dpo}
checkpoint: {{every_steps: {every}}}
output_dir: {self.tmp}/{name}
""")
        done = hf_testing.run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=RANK))
        self.assertNotEqual(done.returncode, 0, done.stdout + done.stderr)
        return done.stdout + done.stderr

    def test_bad_input_is_refused_by_name(self):
        # A pair longer than seq_len + 1: every rank stops before its first collective, naming the pair.
        out = self.run_refused("too_long", ["model.seq_len=16", "parallel.dp=2"])
        self.assertRegex(out, r"pair \d+ has \d+ prompt and \d+ (chosen|rejected) tokens, more than model.seq_len \+ 1 = 17")
        # Not a preference dataset.
        out = self.run_refused("not_pairs", [f"data.path={self.tmp}/nothing"])
        self.assertIn("data.path", out)
        # A resume that would read pairs the first run did not score (2 steps scored 8 pairs).
        self.run_tessera("grown", [], steps=2, every=2)
        out = self.run_refused("grown", [], steps=STEPS, every=2)
        self.assertIn("pair 8 has no reference log-probability", out)
        self.assertIn("train.steps", out)
        # A resume whose loss type needs other reference numbers (per-token means for ipo).
        out = self.run_refused("grown", [], dpo="{beta: 0.1, loss_type: ipo}", steps=2, every=2)
        self.assertIn("per_token_mean false, this job's true: dpo.loss_type changed", out)
        # A resume with another reference than the one scored.
        out = self.run_refused("grown", [], dpo=f"{{beta: 0.1, reference: {self.tmp}/grown/checkpoints}}", steps=2, every=2)
        self.assertIn("dpo.reference changed", out)
        # A reference of another model: named with the field that differs, before any step.
        qwen = os.path.join(self.tmp, "other-model")
        qwen2_lm(self.vocab).save_pretrained(qwen)
        out = self.run_refused("other_reference", [], dpo=f"{{beta: 0.1, reference: {qwen}}}")
        self.assertIn(f"dpo.reference {qwen} was written for model.qkv_bias 1, the spec says 0", out)
        out = self.run_refused("no_reference", [], dpo=f"{{beta: 0.1, reference: {self.tmp}/nowhere}}")
        self.assertIn(f"dpo.reference {self.tmp}/nowhere", out)
        # Another rotary base: the reference would compute otherwise.
        rope = hf_llama(self.vocab)
        rope.config.rope_theta = 500000.0
        rope.save_pretrained(os.path.join(self.tmp, "reference-rope"))
        out = self.run_refused("rope_reference", [], dpo=f"{{beta: 0.1, reference: {self.tmp}/reference-rope}}")
        self.assertIn("was written for model.rope_theta 500000, the spec says", out)
        # A reference directory without a tensor of the second pipeline stage: that rank's error ends
        # the job on every rank (the first stage does not wait in the scoring pass for the second).
        broken = os.path.join(self.tmp, "reference-broken")
        hf_llama(self.vocab).save_pretrained(broken)
        weights = safetensors_io.load(os.path.join(broken, "model.safetensors"))
        del weights["model.layers.1.mlp.down_proj.weight"]
        safetensors_io.save(os.path.join(broken, "model.safetensors"), weights)
        out = self.run_refused("broken_reference", ["parallel.pp=2"], dpo=f"{{beta: 0.1, reference: {broken}}}")
        self.assertIn("layers.1.mlp.down_proj.weight", out)

    def test_the_example_prepares_and_trains(self):
        # examples/dpo-llama.yaml as its comment says, for a few steps, from a few steps of the SFT example.
        steps, _ = run_example(self, TESSERA, RANK, self.tmp, "dpo", "examples/dpo-llama.yaml")
        # Step 1's policy is the reference: h = 0 for every pair, so the loss is log 2 and the rewards 0.
        self.assertAlmostEqual(steps[0]["loss"], math.log(2), delta=1e-6)
        self.assertAlmostEqual(steps[0]["rewards_chosen"], 0.0, delta=1e-7)
        for s in steps:
            for k in METRICS:
                self.assertIn(k, s)
            self.assertEqual(s["tokens"], 2 * 16 * 64)  # Two sequences per pair.


if __name__ == "__main__":
    unittest.main()
