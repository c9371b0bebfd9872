"""GRPO parity (issue 57): `tessera run` with train.objective grpo against an independent PyTorch loop on
the same transformers Llama, fed the job's own rollouts.jsonl.

Per step, from the rollouts tessera sampled and wrote:
- the sampler: each completion's logprobs equal transformers' log-softmax(logits / temperature) of the
  same sequence under the loop's weights of that step (the initial model at step 1);
- the rewards: each reward function recomputed here from transformers' decoding of the completion
  (skip_special_tokens, the text before the EOS) with Python's `re`, and the advantages from those
  rewards as TRL 0.24's GRPOTrainer defines them (group mean, the group's unbiased std + 1e-4);
- the update: the completions split into micro-batches as the spec says (micro_batch completions, in
  batch order), TRL's own GRPOTrainer._compute_loss on each (the policy's per-token log-probabilities
  computed here, one sequence at a time, at the temperature; π_old the policy's own, as TRL at
  num_iterations 1), AdamW with tessera's warmup + cosine and clipping. steps.jsonl's loss, grad_norm
  and reward, and every weight after the last step, within 1e-5.
In one process, dp=2, tp=2, ZeRO-2 and ZeRO-3 (dp=2; also offloaded) and LoRA, with dapo (TRL's default); grpo, bnpo and dr_grpo in
one process. The test can fail: advantages not normalised per group, log-probabilities without the
temperature, or prompt tokens in the loss each give other numbers."""
import copy
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from data_reference import read_indexed_dataset  # noqa: E402
import hf_testing  # noqa: E402
import safetensors_io  # noqa: E402
from grpo_testing import grpo_trainer  # noqa: E402
from preference_testing import chatml_tokenizer  # noqa: E402
from sft_parity_test import EPS, FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, THETA, hf_llama  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
SEQ = 48
PROMPTS, G, GLOBAL, MICRO, STEPS, MAX_NEW, TEMPERATURE = 12, 4, 4, 4, 4, 8, 0.9
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 5e-3, 5e-4, 1, 0.1, (0.9, 0.95), 1e-5, 1.0
# Two regex rewards (weights 1 and 0.5) on letters the tiny model's completions often hold: groups whose
# completions differ, so that the advantages are not all 0.
REWARDS = [("has_a", "a", 1.0), ("has_e", "e", 0.5)]
WORDS = ["cat", "dog", "bird", "fish", "apple", "tree", "red", "blue", "green", "sun", "moon", "star"]
# fp32 on both sides: the step fields and the weights within 1e-5 (the bound), the sampler's
# log-probabilities within 1e-5 (measured: ~1e-6).
TOL = 1e-5
LORA_R, LORA_ALPHA = 4, 8.0
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def prompt_records():
    records = []
    for i in range(PROMPTS):
        words = [WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(2 + i % 3)]
        records.append({"prompt": [{"role": "user", "content": " ".join(words)}], "id": i})
    return records


def group_advantages(rewards):
    """TRL 0.24's scale_rewards "group": (r − the group's mean) / (its unbiased std + 1e-4)."""
    out = []
    for g in range(0, len(rewards), G):
        group = rewards[g:g + G]
        mean = sum(group) / G
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (G - 1))
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


def completion_logps(model, prompt, completion, temperature=TEMPERATURE):
    """log-softmax(logits / T) of each completion token, one sequence (no padding), differentiable."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


class GrpoParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.tokenizer_dir, cls.hf_tokenizer = chatml_tokenizer(cls.tmp)
        cls.vocab = len(cls.hf_tokenizer)
        source = os.path.join(cls.tmp, "prompts.jsonl")
        with open(source, "w") as f:
            for r in prompt_records():
                f.write(json.dumps(r) + "\n")
        cls.data = os.path.join(cls.tmp, "prompts")
        done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", cls.tokenizer_dir,
                               "--prompts", source, cls.data], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        state = hf_llama(cls.vocab).state_dict()
        cls.init = os.path.join(cls.tmp, "init.safetensors")
        safetensors_io.save(cls.init, {k.removeprefix("model."): v.contiguous() for k, v in state.items()
                                       if not k.endswith("rotary_emb.inv_freq")})
        cls.eos = cls.hf_tokenizer.eos_token_id
        cls.prompt_ids = [list(map(int, d)) for d in read_indexed_dataset(cls.data)[1]]

    def run_tessera(self, name, sets, loss_type="dapo", lora="", rewards=None, expect_ok=True, beta=0.0, mu=1,
                    mask=False, rank=RANK):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        rewards = rewards or ", ".join(f"{{name: {n}, kind: regex, pattern: '{p}', weight: {w}}}" for n, p, w in REWARDS)
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS}, ffn_hidden: {FFN},
        vocab: {self.vocab}, norm_eps: {EPS}, rope_theta: {THETA}, init_from: {self.init}, seq_len: {SEQ}{lora}}}
data: {{path: {self.data}}}
train: {{objective: grpo, steps: {STEPS}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}, seed: 5}}
grpo: {{num_generations: {G}, max_completion_tokens: {MAX_NEW}, temperature: {TEMPERATURE}, loss_type: {loss_type},
       beta: {beta}, num_iterations: {mu}, mask_truncated_completions: {str(mask).lower()}, rewards: [{rewards}]}}
output_dir: {self.tmp}/{name}
""")
        done = hf_testing.run_tessera(TESSERA, spec, sets, dict(os.environ, TESSERA_RANK_BINARY=rank))
        if not expect_ok:
            return done
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        out = os.path.join(self.tmp, name)
        with open(os.path.join(out, "steps.jsonl")) as f:
            steps = [json.loads(line) for line in f if "warning" not in line]
        with open(os.path.join(out, "rollouts.jsonl")) as f:
            rollouts = [json.loads(line) for line in f]
        ckpt = os.path.join(out, "checkpoints", f"step_{STEPS:08d}", "model.safetensors")
        return steps, rollouts, safetensors_io.load(ckpt)

    def text_of(self, completion):
        ids = completion[:completion.index(self.eos)] if self.eos in completion else completion
        return self.hf_tokenizer.decode(ids, skip_special_tokens=True)

    def check(self, name, sets, loss_type="dapo", lora=False, beta=0.0, mu=1, mask=False):
        lora_spec = (f", lora: {{rank: {LORA_R}, alpha: {LORA_ALPHA}, targets: [{', '.join(LORA_TARGETS)}], "
                     f"init_from: {self.tmp}/adapter}}") if lora else ""
        model = hf_llama(self.vocab)
        if lora:
            import peft
            torch.manual_seed(4)
            config = peft.LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                     init_lora_weights=False, task_type="CAUSAL_LM")
            model = peft.get_peft_model(model, config)
            model.save_pretrained(os.path.join(self.tmp, "adapter"))
        # β > 0: TRL's reference, a frozen copy of the initial model (under LoRA the base: peft's
        # disable_adapter, as TRL with peft).
        reference = copy.deepcopy(model).eval() if beta and not lora else None
        steps, rollouts, saved = self.run_tessera(name, sets, loss_type, lora_spec, beta=beta, mu=mu, mask=mask)
        self.assertEqual([s["step"] for s in steps], list(range(1, STEPS + 1)))
        # grpo.num_iterations μ: a generation every μ steps, its rollouts logged at its first step.
        self.assertEqual(len(rollouts), STEPS // mu * GLOBAL * G)

        def zero(prompts, completions, **kwargs):
            return [0.0] * len(completions)
        mask_truncated = mask
        trl = grpo_trainer(self.tmp, self.hf_tokenizer, [zero], num_generations=G, per_device_train_batch_size=MICRO,
                           loss_type=loss_type, beta=0.0, max_completion_length=MAX_NEW, temperature=TEMPERATURE)
        micro_batches = GLOBAL * G // MICRO
        trl.current_gradient_accumulation_steps = micro_batches
        trl.beta = beta  # Set after construction: TRL would load a reference by name (given here).
        trl.model.train()  # Its metrics then go to _metrics["train"].
        trained = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW([{"params": [p for p in trained if p.dim() >= 2], "weight_decay": WD},
                                 {"params": [p for p in trained if p.dim() < 2], "weight_decay": 0.0}],
                                lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
        worst = {"logprobs": 0.0, "loss": 0.0, "grad_norm": 0.0, "kl": 0.0}
        for step in range(STEPS):
            generation = step // mu
            batch = [r for r in rollouts if r["step"] == generation * mu + 1]
            self.assertEqual([(r["prompt_index"], r["sample"]) for r in batch],
                             [(j, s) for j in range(GLOBAL) for s in range(G)])
            # Step s takes prompts s·B … s·B+B−1 of the file, wrapping (data.shuffle false).
            for r in batch:
                self.assertEqual(r["prompt_ids"], self.prompt_ids[(generation * GLOBAL + r["prompt_index"]) % PROMPTS])
            # The rewards from the decoded text, the advantages from the rewards.
            rewards = []
            for r in batch:
                text = self.text_of(r["completion_ids"])
                want = {n: (1.0 if re.search(p, text) else 0.0) for n, p, _ in REWARDS}
                self.assertEqual(r["rewards"], want, f"{name} step {step + 1}: {text!r}")
                rewards.append(sum(w * want[n] for n, _, w in REWARDS))
                self.assertAlmostEqual(r["reward"], rewards[-1], places=12)
                self.assertEqual(r["truncated"], len(r["completion_ids"]) == MAX_NEW and self.eos not in r["completion_ids"])
            advantages = group_advantages(rewards)
            for r, a in zip(batch, advantages):
                self.assertLessEqual(abs(r["advantage"] - a), 1e-9 * max(1.0, abs(a)))
            self.assertLessEqual(abs(steps[step]["reward"] - sum(rewards) / len(rewards)), 1e-12)
            # The update.
            for group in opt.param_groups:
                group["lr"] = gpt_reference.lr_at(step, LR, MIN_LR, WARMUP, STEPS, True)
            opt.zero_grad(set_to_none=True)
            tokens = sum(len(r["completion_ids"]) for r in batch)
            total = 0.0
            trl._metrics["train"].clear()
            for m in range(micro_batches):
                rows = batch[m * MICRO:(m + 1) * MICRO]
                logps = [completion_logps(model, r["prompt_ids"], r["completion_ids"]) for r in rows]
                if step % mu == 0:  # The weights that sampled them.
                    for r, lp in zip(rows, logps):
                        worst["logprobs"] = max(worst["logprobs"],
                                                max(abs(a - b) for a, b in zip(lp.tolist(), r["logprobs"])))
                width = max(len(r["completion_ids"]) for r in rows)
                padded = torch.stack([torch.nn.functional.pad(lp, (0, width - len(lp))) for lp in logps])
                # mask_truncated_completions: a truncated completion's tokens add no loss (TRL's
                # completion_mask zeroed), though dapo's count keeps them (num_items_in_batch).
                mask = torch.tensor([[0 if mask_truncated and r["truncated"] else 1] * len(r["completion_ids"])
                                     + [0] * (width - len(r["completion_ids"])) for r in rows])
                trl._get_per_token_logps_and_entropies = lambda *a, **k: (padded, torch.zeros_like(padded))
                inputs = {"prompt_ids": torch.ones(len(rows), 2, dtype=torch.long),
                          "prompt_mask": torch.ones(len(rows), 2, dtype=torch.long),
                          "completion_ids": torch.ones(len(rows), width, dtype=torch.long), "completion_mask": mask,
                          "advantages": torch.tensor([advantages[m * MICRO + i] for i in range(len(rows))]),
                          "num_items_in_batch": torch.tensor(float(tokens))}
                if mu > 1:  # π_old: the policy that sampled (its log-probabilities, checked above).
                    inputs["old_per_token_logps"] = torch.tensor(
                        [r["logprobs"] + [0.0] * (width - len(r["logprobs"])) for r in rows])
                if beta:
                    with torch.no_grad():
                        if lora:
                            with model.disable_adapter():
                                ref = [completion_logps(model, r["prompt_ids"], r["completion_ids"]) for r in rows]
                        else:
                            ref = [completion_logps(reference, r["prompt_ids"], r["completion_ids"]) for r in rows]
                    inputs["ref_per_token_logps"] = torch.stack(
                        [torch.nn.functional.pad(lp, (0, width - len(lp))) for lp in ref])
                loss = trl._compute_loss(model, inputs)
                loss.backward()
                total += loss.item()
            norm = float(torch.nn.utils.clip_grad_norm_(trained, CLIP))
            opt.step()
            checks = [("loss", total), ("grad_norm", norm)]
            if beta:  # TRL's kl: each micro-batch's mean over its completion tokens, averaged.
                checks.append(("kl", sum(trl._metrics["train"]["kl"]) / micro_batches))
            for key, want in checks:
                diff = abs(steps[step][key] - want)
                worst[key] = max(worst[key], diff)
                self.assertLessEqual(diff, TOL * max(1.0, abs(want)),
                                     f"{name} step {step + 1} {key}: tessera {steps[step][key]} vs {want}")
        self.assertLessEqual(worst["logprobs"], TOL, f"{name}: the sampler's log-probabilities")
        if lora:
            model.save_pretrained(os.path.join(self.tmp, f"{name}-adapters"))
            got = safetensors_io.load(os.path.join(self.tmp, f"{name}-adapters", "adapter_model.safetensors"))
            weights = {k.removeprefix("base_model.model.model."): v for k, v in got.items()}
        else:
            weights = {k.removeprefix("model."): v.detach() for k, v in model.state_dict().items()
                       if not k.endswith("rotary_emb.inv_freq")}
        wdiff, wname = max((float((saved[k].double() - v.double()).abs().max()), k) for k, v in weights.items())
        print(f"{name}: reward {steps[0]['reward']:.3f} -> {steps[-1]['reward']:.3f}; largest differences: "
              f"logprobs {worst['logprobs']:.1e}, loss {worst['loss']:.1e}, grad_norm {worst['grad_norm']:.1e}, "
              f"weights {wdiff:.1e} ({wname})")
        self.assertLessEqual(wdiff, TOL, f"{name}: the weights after step {STEPS}")
        return steps, rollouts

    def test_single(self):
        steps, rollouts = self.check("single", [])
        # steps.jsonl's GRPO fields.
        for s in steps:
            for key in ["reward", "reward_std", "frac_reward_zero_std", "reward_has_a", "reward_has_e", "kl",
                        "clip_ratio", "completion_length", "completion_length_max", "truncated_fraction",
                        "generation_seconds", "generated_tokens_per_s"]:
                self.assertIn(key, s)
            batch = [r for r in rollouts if r["step"] == s["step"]]
            self.assertAlmostEqual(s["completion_length"], sum(len(r["completion_ids"]) for r in batch) / len(batch))
            self.assertEqual(s["tokens"], GLOBAL * G * SEQ)

    def test_resume_samples_the_same(self):
        # Two steps, a checkpoint, then the last two in a second run: the same completions, losses and
        # weights as one run of four (the sampler's seeds are the job's seed, the step and the prompt).
        whole = self.run_tessera("whole", [])
        first = self.run_tessera("halves", ["checkpoint.every_steps=2", "train.steps=2"], expect_ok=False)
        self.assertEqual(first.returncode, 0, first.stdout + first.stderr)
        with open(os.path.join(self.tmp, "halves", "rollouts.jsonl"), "a") as f:
            f.write('{"step": 3, "left": "by a run that died after step 2"}\n')
        steps, rollouts, saved = self.run_tessera("halves", ["checkpoint.every_steps=2"])
        self.assertEqual([s["step"] for s in steps], list(range(1, STEPS + 1)))
        self.assertEqual(rollouts, whole[1])
        for a, b in zip(steps, whole[0]):
            self.assertEqual((a["loss"], a["grad_norm"], a["reward"]), (b["loss"], b["grad_norm"], b["reward"]))
        for k, v in whole[2].items():
            self.assertTrue(torch.equal(saved[k], v), k)

    def test_bad_inputs(self):
        # A prompt that leaves no room for a whole completion, named before anything trains.
        done = self.run_tessera("long", [f"grpo.max_completion_tokens={SEQ - 2}"], expect_ok=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("prompt 0 has", done.stdout + done.stderr)
        self.assertIn("prompts may have 3", done.stdout + done.stderr)
        # A model whose vocabulary is larger than the tokenizer's (padded, as many pretrained models'): the
        # ids past the tokenizer's are left out of the text the rewards see, not an error.
        done = self.run_tessera("padded_vocab", ["model.init_from=null", "model.vocab=512", "train.steps=2"],
                                expect_ok=False)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        # A FIFO where the dataset's tokenizer belongs: refused by name, never waited on.
        fifo = os.path.join(self.tmp, "fifo_prompts")
        for ext in (".bin", ".idx", ".fields.jsonl", ".prompts.json"):
            shutil.copy(self.data + ext, fifo + ext)
        os.mkfifo(fifo + ".tokenizer.json")
        done = self.run_tessera("fifo", [f"data.path={fifo}"], expect_ok=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("tokenizer.json: not a regular file", done.stdout + done.stderr)
        # Reward programs that print text, exit or hang: the step fails naming the reward, nothing trains
        # on missing rewards (no step line).
        for name, script, expected in [
                ("text", "read l; echo not-a-number", "reward words"),
                ("exits", "exit 3", "reward words"),
                ("hangs", "sleep 60", "reward words")]:
            with self.subTest(name):
                rewards = (f"{{name: words, kind: program, command: [/bin/sh, -c, '{script}'], timeout_s: 2}}")
                done = self.run_tessera(f"bad_{name}", [], rewards=rewards, expect_ok=False)
                self.assertNotEqual(done.returncode, 0)
                self.assertIn(expected, done.stdout + done.stderr)
                log = os.path.join(self.tmp, f"bad_{name}", "steps.jsonl")
                if os.path.exists(log):
                    with open(log) as f:
                        self.assertNotIn('"loss"', f.read())

    def test_beta(self):
        self.check("beta", [], beta=0.04)

    def test_beta_tp2_lora(self):
        self.check("beta_tp2", ["parallel.tp=2"], beta=0.04)
        self.check("beta_lora", [], beta=0.04, lora=True)

    def test_num_iterations(self):
        # Two updates per generation: π_old the sampler's, the ratio apart from 1 in the second (clipped
        # where it leaves [1 − ε, 1 + ε]); in one process and dp2, with grpo's normalisation and β.
        steps, _ = self.check("mu2", [], mu=2)
        self.assertEqual([s["generation_seconds"] > 0 for s in steps], [True, False, True, False])
        self.check("mu2_dp2_grpo_beta", ["parallel.dp=2"], loss_type="grpo", beta=0.04, mu=2)

    def test_example_learns(self):
        # examples/grpo-llama.yaml as its comment says, from the SFT example's model: the share of right
        # answers over the last 10 steps at least 3 times the first 10's (measured: 0.09 -> 0.70, 7.4x,
        # in 12 s on 2 cores; 4.9x-10x with train.seed 1-4), and the curve plotted.
        env = dict(os.environ, TESSERA_RANK_BINARY=RANK)
        sft_data, prompts = os.path.join(self.tmp, "example-sft"), os.path.join(self.tmp, "example-prompts")
        for kind, src, out in [("--chat", "examples/sft/chats.jsonl", sft_data),
                               ("--prompts", "examples/grpo/prompts.jsonl", prompts)]:
            done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", "examples/sft", kind, src,
                                   out], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("60 prompts", done.stdout)
        sft_out, run_out = os.path.join(self.tmp, "example-sft-run"), os.path.join(self.tmp, "example-grpo")
        done = hf_testing.run_tessera(TESSERA, "examples/sft-llama.yaml",
                                      [f"data.path={sft_data}", f"output_dir={sft_out}"], env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        start = os.path.join(sft_out, "checkpoints", "step_00000100", "model.safetensors")
        done = hf_testing.run_tessera(TESSERA, "examples/grpo-llama.yaml",
                                      [f"data.path={prompts}", f"output_dir={run_out}", f"model.init_from={start}"], env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(run_out, "steps.jsonl")) as f:
            rewards = [json.loads(line)["reward"] for line in f if "warning" not in line]
        self.assertEqual(len(rewards), 150)
        first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
        print(f"example: mean reward {first:.3f} over the first 10 steps, {last:.3f} over the last 10")
        self.assertGreaterEqual(last, 3 * first)
        self.assertGreater(first, 0)
        png = os.path.join(self.tmp, "reward.png")
        done = subprocess.run([sys.executable, "tools/plot_steps.py", os.path.join(run_out, "steps.jsonl"), "--field",
                               "reward", "--out", png], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_slow_reward_program_outlasts_the_collective_timeout(self):
        # The ranks wait for one another at most --timeout_s (8 s here, through a wrapper of the rank);
        # a program that takes ~12 s to score a step's 16 completions still finishes the job: rank 0
        # tells the others every 5 s that it is still scoring.
        wrapper = os.path.join(self.tmp, "rank_with_short_timeout.sh")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec {RANK} \"$@\" --timeout_s=8\n")
        os.chmod(wrapper, 0o755)
        script = "while read l; do sleep 0.75; echo 1; done"
        rewards = f"{{name: slow, kind: program, command: [/bin/sh, -c, '{script}'], timeout_s: 60}}"
        spec_sets = ["parallel.dp=2", "train.steps=1", "train.global_batch=4", "grpo.max_completion_tokens=2"]
        done = self.run_tessera("slow_reward", spec_sets, rewards=rewards, expect_ok=False, rank=wrapper)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, "slow_reward", "steps.jsonl")) as f:
            self.assertEqual(json.loads(f.readline())["reward"], 1.0)

    def test_a_reward_model_scores_the_completions(self):
        # kind: model — a transformers LlamaForSequenceClassification (drawn, seed 11) scores each
        # completion's prompt + completion ids on rank 0, as transformers' own forward scores them
        # (logits at the last token, within 1e-5); its rewards enter the advantages with the others'.
        import transformers
        config = transformers.LlamaConfig(
            vocab_size=self.vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ, rms_norm_eps=EPS,
            rope_theta=THETA, tie_word_embeddings=False, num_labels=1)
        torch.manual_seed(11)
        rm = transformers.LlamaForSequenceClassification(config).float().eval()
        rm_dir = os.path.join(self.tmp, "reward-model")
        rm.save_pretrained(rm_dir, safe_serialization=True)
        rewards = (f"{{name: rm, kind: model, path: {rm_dir}}}, "
                   f"{{name: has_a, kind: regex, pattern: 'a', weight: 0.5}}")
        steps, rollouts, _ = self.run_tessera("reward_model", ["parallel.dp=2"], rewards=rewards)
        worst = 0.0
        for step in range(STEPS):
            batch = [r for r in rollouts if r["step"] == step + 1]
            totals = []
            for r in batch:
                with torch.no_grad():
                    want = float(rm(input_ids=torch.tensor([r["prompt_ids"] + r["completion_ids"]])).logits[0, 0])
                worst = max(worst, abs(r["rewards"]["rm"] - want))
                self.assertLessEqual(abs(r["rewards"]["rm"] - want), TOL * max(1.0, abs(want)))
                has_a = 1.0 if re.search("a", self.text_of(r["completion_ids"])) else 0.0
                self.assertEqual(r["rewards"]["has_a"], has_a)
                totals.append(r["rewards"]["rm"] + 0.5 * has_a)
                self.assertAlmostEqual(r["reward"], totals[-1], places=9)
            for r, a in zip(batch, group_advantages(totals)):
                self.assertLessEqual(abs(r["advantage"] - a), 1e-6 * max(1.0, abs(a)))
            self.assertAlmostEqual(steps[step]["reward_rm"], sum(r["rewards"]["rm"] for r in batch) / len(batch), places=9)
        print(f"reward model: largest difference from transformers' scores {worst:.1e}")
        # A causal LM is no reward model, and a reward model of another vocabulary is refused by name.
        lm_dir = os.path.join(self.tmp, "causal-lm")
        hf_llama(self.vocab).save_pretrained(lm_dir, safe_serialization=True)
        config.vocab_size = self.vocab + 8
        other_dir = os.path.join(self.tmp, "other-vocab-rm")
        transformers.LlamaForSequenceClassification(config).save_pretrained(other_dir, safe_serialization=True)
        for name, path, message in [("not_rm", lm_dir, "not a reward model (its head is an LM head)"),
                                    ("other_vocab", other_dir, f"its vocabulary is {self.vocab + 8} ids, the policy's")]:
            done = self.run_tessera(name, [], rewards=f"{{name: rm, kind: model, path: {path}}}", expect_ok=False)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn(f"grpo.rewards[0] (rm): {path}: {message}", done.stdout + done.stderr)

    def test_dp2(self):
        self.check("dp2", ["parallel.dp=2"])

    def test_tp2(self):
        self.check("tp2", ["parallel.tp=2"])

    def test_zero2(self):
        self.check("zero2", ["parallel.dp=2", "parallel.zero_stage=2"])

    def test_zero3(self):
        # The parameters gathered once a generation for the sampler (ZeroOptimizer::HoldGathered), then
        # unit by unit for training; with β the reference apart, and with the optimizer offloaded.
        self.check("zero3", ["parallel.dp=2", "parallel.zero_stage=3"])
        self.check("zero3_beta_offload", ["parallel.dp=2", "parallel.zero_stage=3", "optimizer.offload=cpu"], beta=0.04)

    def test_lora(self):
        self.check("lora", [], lora=True)

    def test_loss_types(self):
        for loss_type in ["grpo", "bnpo", "dr_grpo"]:
            with self.subTest(loss_type=loss_type):
                self.check(f"single_{loss_type}", [], loss_type=loss_type)
        # Truncated completions masked (most of this model's are): every loss type's own normalisation,
        # dapo's count still every token.
        for loss_type in ["dapo", "grpo"]:
            with self.subTest(loss_type=loss_type, mask=True):
                steps, _ = self.check(f"masked_{loss_type}", [], loss_type=loss_type, mask=True)
                self.assertGreater(max(s["truncated_fraction"] for s in steps), 0)


if __name__ == "__main__":
    unittest.main()
