"""DPO parity: `tessera run` with train.objective dpo against TRL 0.24's own DPOTrainer on the same
transformers Llama, pairs and order. The pairs are prepared by `tessera data prepare --preference`
(its ids equal TRL's tokenize_row: preference_data_test.py) and TRL is fed the same ids through its own
DataCollatorForPreference; each TRL step is DPOTrainer.get_batch_loss_metrics per micro-batch (its
concatenated_forward, its reference pass through a frozen copy of the initial model, its dpo_loss and
metrics), the micro-batch losses averaged, with AdamW, warmup + cosine LR and clipping as tessera's
spec defines them. Per step: the loss and the six reward fields of steps.jsonl (rewards_chosen,
rewards_rejected, rewards_margin, rewards_accuracy, logps_chosen, logps_rejected); after the last
step, every weight. In one process, dp=2, tp=2, pp=2 and ZeRO-3 with offload; ipo and label smoothing
in one process; a resume from a checkpoint half way. The test can fail: the reference updated with the
policy, prompt tokens counted in the log-probabilities, or per-token means instead of sums each give
other numbers (the mutations in the note of issue 56)."""
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch
import transformers
from transformers import PreTrainedTokenizerFast
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_test as ct  # noqa: E402
import gpt_reference  # noqa: E402
import hf_testing  # noqa: E402
import safetensors_io  # noqa: E402
from data_reference import read_indexed_dataset  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, SEQ = 2, 64, 4, 2, 160, 64
EPS, THETA = 1e-5, 10000.0
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

WORDS = "the cat sat on a mat while two dogs ran past an old barn and a farmer laughed yes no maybe".split()


def pair_records(n, seed):
    """Seeded single-turn pairs: a short question, a chosen answer that repeats the question's words, a
    rejected one of other words (so a model can learn to prefer chosen)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        q = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        out.append({"prompt": [{"role": "user", "content": " ".join(q)}],
                    "chosen": [{"role": "assistant", "content": " ".join(q[: rng.randint(1, len(q))])}],
                    "rejected": [{"role": "assistant",
                                  "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))}]})
    return out


def hf_llama(vocab):
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False, hidden_act="silu")
    torch.manual_seed(3)
    return transformers.LlamaForCausalLM(config).float()


def train_trl(tokenizer, pairs, vocab, tmp, loss_type="sigmoid", beta=0.1, label_smoothing=0.0):
    """TRL's DPO on `pairs` [(prompt, chosen, rejected) ids] as tessera's spec defines the step: micro-batches
    of MICRO pairs in file order, GLOBAL pairs a step. Returns (losses, metrics per step, final weights)."""
    model = hf_llama(vocab)
    ref = copy.deepcopy(model).eval()
    args = DPOConfig(output_dir=os.path.join(tmp, "trl"), beta=beta, loss_type=loss_type,
                     label_smoothing=label_smoothing, report_to=[], use_cpu=True, padding_value=0,
                     max_length=None, max_prompt_length=None, max_completion_length=None,
                     bf16=False)  # transformers' default on a CPU with bf16 runs the reference under autocast.
    import datasets
    dataset = datasets.Dataset.from_list([{"prompt": "a", "chosen": "b", "rejected": "c"}])
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer)
    collate = DataCollatorForPreference(pad_token_id=0)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS, foreach=False)
    losses, metrics = [], []
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = gpt_reference.lr_at(step, LR, MIN_LR, WARMUP, STEPS, True)
        opt.zero_grad(set_to_none=True)
        total, sums = 0.0, {k: 0.0 for k in METRICS}
        micro_batches = GLOBAL // MICRO
        for m in range(micro_batches):
            chunk = [pairs[(step * GLOBAL + m * MICRO + i) % len(pairs)] for i in range(MICRO)]
            batch = collate([{"prompt_input_ids": p, "chosen_input_ids": c, "rejected_input_ids": r}
                             for p, c, r in chunk])
            loss, got = trainer.get_batch_loss_metrics(model, batch, train_eval="train")
            (loss / micro_batches).backward()
            total += loss.item() / micro_batches
            for k, name in METRICS.items():
                sums[k] += got[name] / micro_batches
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(total)
        metrics.append(sums)
    weights = {k.removeprefix("model."): v.detach().clone() for k, v in model.state_dict().items()
               if not k.endswith("rotary_emb.inv_freq")}
    return losses, metrics, weights


class DpoParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        fast = PreTrainedTokenizerFast(tokenizer_object=ct.small_tokenizer(), bos_token="<s>", eos_token="</s>",
                                       additional_special_tokens=["<|im_start|>", "<|im_end|>"])
        fast.chat_template = ct.CHATML
        cls.tokenizer_dir = os.path.join(cls.tmp, "tokenizer")
        fast.save_pretrained(cls.tokenizer_dir)
        cls.hf_tokenizer = PreTrainedTokenizerFast.from_pretrained(cls.tokenizer_dir)
        cls.vocab = len(cls.hf_tokenizer)
        with open(os.path.join(cls.tmp, "pairs.jsonl"), "w", encoding="utf-8") as f:
            for r in pair_records(PAIRS, seed=7):
                f.write(json.dumps(r) + "\n")
        cls.data = os.path.join(cls.tmp, "pairs")
        done = subprocess.run([TESSERA, "data", "prepare", "--no-progress", "--tokenizer", cls.tokenizer_dir,
                               "--preference", os.path.join(cls.tmp, "pairs.jsonl"), cls.data],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        _, docs = read_indexed_dataset(cls.data)
        cls.pairs = [tuple(list(map(int, docs[3 * i + k])) for k in range(3)) for i in range(PAIRS)]
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

    def run_tessera(self, name, sets, dpo="{beta: 0.1}", steps=STEPS, every=0):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {self.vocab}, seq_len: {SEQ}, norm_eps: {EPS}, rope_theta: {THETA},
        init_from: {self.init}}}
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

    def check(self, name, steps, want, weights_of=None):
        losses, metrics, weights = want
        self.assertEqual([s["step"] for s in steps], list(range(1, STEPS + 1)))
        worst = 0.0
        for s, loss, m in zip(steps, losses, metrics):
            for key, got, expect in [("loss", s["loss"], loss)] + [(k, s[k], m[k]) for k in METRICS]:
                diff = abs(got - expect)
                worst = max(worst, diff)
                self.assertLessEqual(diff, TOL * max(1.0, abs(expect)),
                                     f"{name} step {s['step']} {key}: tessera {got} vs TRL {expect}")
        self.assertLess(losses[-1], losses[0], "the run learns")
        got = self.final_weights(weights_of or name)
        wdiff, wname = max((float((got[k].double() - v.double()).abs().max()), k) for k, v in weights.items())
        print(f"{name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, max difference {worst:.2e} in the step fields, "
              f"{wdiff:.2e} in the weights ({wname})")
        self.assertLessEqual(wdiff, TOL, f"{name}: the weights after step {STEPS}")

    def test_sigmoid_in_every_layout(self):
        want = self.reference()
        for name, sets in [("single", []), ("dp2", ["parallel.dp=2"]), ("tp2", ["parallel.tp=2"]),
                           ("pp2", ["parallel.pp=2"]),
                           ("zero3_offload", ["parallel.dp=2", "parallel.zero_stage=3", "optimizer.offload=cpu"])]:
            self.check(name, self.run_tessera(name, sets), want)

    def test_ipo_and_label_smoothing(self):
        self.check("ipo", self.run_tessera("ipo", [], dpo="{beta: 0.1, loss_type: ipo}"), self.reference("ipo"))
        self.check("smoothed", self.run_tessera("smoothed", [], dpo="{beta: 0.1, label_smoothing: 0.2}"),
                   self.reference("sigmoid", 0.2))

    def test_resume_keeps_the_reference(self):
        # A run with a checkpoint after step 4, its last checkpoint removed, run again: it resumes at step
        # 4 with the reference log-probabilities from the checkpoint (the initial weights are gone), and
        # its steps 5-8 and final weights are the uninterrupted run's.
        self.run_tessera("resumed", [], every=STEPS // 2)
        shutil.rmtree(os.path.join(self.tmp, "resumed", "checkpoints", f"step_{STEPS:08d}"))
        steps = self.run_tessera("resumed", [], every=STEPS // 2)
        self.assertEqual(steps[STEPS // 2]["resumed_from"], STEPS // 2)
        self.check("resumed", steps, self.reference())

if __name__ == "__main__":
    unittest.main()
