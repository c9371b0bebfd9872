"""LoRA against peft itself: a transformers LlamaForCausalLM wrapped by peft's get_peft_model (rank 4,
alpha 8, every linear of the blocks targeted, drawn with init_lora_weights=False so that B is not zero),
its adapter saved by save_pretrained, the base weights given to tessera as model.init_from and the
adapter as model.lora.init_from. Ten steps of next-token training (warmup, cosine LR, weight decay,
clipping over the adapters) equal the same training of the peft model in PyTorch: within 1e-4
relative in one process, 1e-3 with tp=2, tp=4 (key/value heads shared by two ranks), pp=2, sp=2,
ZeRO-2 and ZeRO-3 with offload at dp=2, activation checkpointing, bf16 within 1e-2 of peft's fp32. LoRA dropout
(masks drawn by tessera's documented rule in peft's dropout modules) equals peft's training in one process,
tp=2, sp=2, pp=2 with recomputation and ZeRO-2. Only the adapters train: the checkpoints hold the adapters and their optimizer state only,
a run resumed from step 5 continues exactly, and `tessera export` writes a PEFT adapter directory
that PeftModel.from_pretrained loads over the base, giving the model peft's own training reached;
`tessera export --merge` writes the merged model, whose logits equal peft's merge_and_unload (1e-5);
`tessera generate` of the LoRA checkpoint, and of the base with --lora DIR, gives peft's logits (1e-5).
A MixtralForCausalLM with adapters on its attention (router and experts frozen, balancing loss in the
objective) trains as peft's in one process and with ep=2. The test can fail: the same training without the
adapter's scale alpha/r (or with B·A applied twice) moves the losses far past the tolerance."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import peft
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
import hf_testing  # noqa: E402
import safetensors_io  # noqa: E402
from hf_testing import CausalLm, assert_losses_close, write_tokens  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
GENERATE = os.path.abspath("generate/tessera-generate")
ENV = dict(os.environ, TESSERA_RANK_BINARY=RANK, TESSERA_GENERATE_BINARY=GENERATE)
PROMPT = [5, 17, 42, 99, 3, 250, 7, 12]
LOGITS_TOL = 1e-5  # The same fp32 weights on both sides.
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 2, 64, 4, 2, 160, 256, 32
EPS, THETA = 1e-5, 10000.0
RANK_R, ALPHA = 4, 8.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MICRO, GLOBAL, STEPS = 2, 8, 10
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 1e-2, 1e-3, 3, 0.1, (0.9, 0.95), 1e-8, 1.0
SINGLE_TOL, PARALLEL_TOL = 1e-4, 1e-3
BF16_TOL = 1e-2  # 8 significant bits in every product, the base's too (measured 3.1e-3).


def base_llama(state=None):
    """The base model: drawn, or with the weights `state`."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False, hidden_act="silu")
    torch.manual_seed(3)
    model = transformers.LlamaForCausalLM(config).float()
    if state is not None:
        model.load_state_dict(state)
    return model


def lora_model(base_state, adapter_dir=None):
    """The base with peft's LoRA: drawn (init_lora_weights=False: A and B random) or loaded."""
    base = base_llama(base_state)
    if adapter_dir:
        return peft.PeftModel.from_pretrained(base, adapter_dir, is_trainable=True)
    torch.manual_seed(4)
    config = peft.LoraConfig(r=RANK_R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS,
                             init_lora_weights=False, task_type="CAUSAL_LM")
    return peft.get_peft_model(base, config)


MASK64 = (1 << 64) - 1
TRAIN_SEED = 1234  # train.seed's default.


def micro_batch_seed(first):
    """The seed of the micro-batch whose first sample is global sample `first` (as the trainer's)."""
    h = 0x94d049bb133111eb ^ TRAIN_SEED
    h = ((h ^ first) * 0xbf58476d1ce4e5b9) & MASK64
    return h ^ (h >> 29)


def tensor_seed(seed, name):
    """FNV-1a of `name` mixed with `seed`."""
    h = 1469598103934665603 ^ seed
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & MASK64
    return h


class RuleDropout(torch.nn.Module):
    """peft's lora_dropout with tessera's masks: `calls` counts the model's forward passes (micro-batches)."""

    def __init__(self, p, weight_name, calls):
        super().__init__()
        self.p, self.weight_name, self.calls = p, weight_name, calls

    def forward(self, x):
        if not self.training:
            return x
        step, a = divmod(self.calls[0], GLOBAL // MICRO)
        g = torch.Generator().manual_seed(tensor_seed(micro_batch_seed(step * GLOBAL + a * MICRO), self.weight_name))
        keep = (torch.rand(x.shape, generator=g) < 1 - self.p).float() / (1 - self.p)
        return x * keep


class LoraParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = write_tokens(cls.tmp, stride=7, seed=5)
        # A base that has learned something (15 steps of full training on shuffled windows), so that
        # the adapters have something to adapt within ten steps.
        base = base_llama()
        shuffled = gpt_reference.Samples(cls.data, SEQ, True, 99)
        gpt_reference.train(CausalLm(base), shuffled, 15, GLOBAL, GLOBAL, 1e-2, 1e-3, 2, True, WD, BETAS, ADAM_EPS, CLIP)
        cls.base_state = {k: v.detach().clone() for k, v in base.state_dict().items()}
        cls.init = os.path.join(cls.tmp, "base.safetensors")
        safetensors_io.save(cls.init, {k.removeprefix("model."): v.contiguous() for k, v in cls.base_state.items()
                                       if not k.endswith("rotary_emb.inv_freq")})
        cls.adapter = os.path.join(cls.tmp, "adapter")
        lora_model(cls.base_state).save_pretrained(cls.adapter)
        cls.trained = lora_model(cls.base_state, cls.adapter)
        cls.want = cls.train_reference(cls.trained)

    @staticmethod
    def train_reference(model):
        model.train()
        samples = gpt_reference.Samples(LoraParityTest.data, SEQ, False, 0)
        return gpt_reference.train(CausalLm(model), samples, STEPS, MICRO, GLOBAL, LR, MIN_LR, WARMUP, True, WD, BETAS,
                                   ADAM_EPS, CLIP)

    def run_tessera(self, name, sets=(), checkpoint_every=STEPS, dropout=0.0):
        spec = os.path.join(self.tmp, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {{family: llama, layers: {LAYERS}, hidden: {HIDDEN}, heads: {HEADS}, kv_heads: {KV_HEADS},
        ffn_hidden: {FFN}, vocab: {VOCAB}, seq_len: {SEQ}, norm_eps: {EPS}, rope_theta: {THETA},
        init_from: {self.init},
        lora: {{rank: {RANK_R}, alpha: {ALPHA}, targets: [{", ".join(TARGETS)}], init_from: {self.adapter},
               dropout: {dropout}}}}}
data: {{path: {self.data}}}
train: {{steps: {STEPS}, micro_batch: {MICRO}, global_batch: {GLOBAL}, lr: {LR}, min_lr: {MIN_LR},
        warmup_steps: {WARMUP}, schedule: cosine, weight_decay: {WD}, betas: [{BETAS[0]}, {BETAS[1]}],
        eps: {ADAM_EPS}, grad_clip: {CLIP}}}
checkpoint: {{every_steps: {checkpoint_every}}}
output_dir: {self.tmp}/{name}
""")
        done = hf_testing.run_tessera(TESSERA, spec, list(sets), ENV)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            return [json.loads(line)["loss"] for line in f]

    def test_single_process_matches_peft(self):
        got = self.run_tessera("single", checkpoint_every=5)
        assert_losses_close(self, "single", got, self.want, STEPS, SINGLE_TOL)
        # The test can fail: B·A at twice its scale trains elsewhere.
        wrong = lora_model(self.base_state, self.adapter)
        for module in wrong.modules():
            if isinstance(module, peft.tuners.lora.LoraLayer):
                module.scaling = {k: 2 * v for k, v in module.scaling.items()}
        gap = max(abs(a - b) / abs(b) for a, b in zip(self.train_reference(wrong), self.want))
        print(f"twice the adapters' scale would move the losses by up to {gap:.2e}")
        self.assertGreater(gap, 10 * PARALLEL_TOL)
        # Only the adapters are trained and saved: model and optimizer state of the adapters alone.
        ckpt = os.path.join(self.tmp, "single", "checkpoints", f"step_{STEPS:08d}")
        names = set(safetensors_io.load(os.path.join(ckpt, "model.safetensors")))
        adapters = {k.removeprefix("base_model.model.model.")
                    for k in safetensors_io.load(os.path.join(self.adapter, "adapter_model.safetensors"))}
        self.assertEqual(names, adapters)
        state = set(safetensors_io.load(os.path.join(ckpt, "optimizer.safetensors")))
        self.assertEqual(state, {f"exp_avg.{n}" for n in adapters} | {f"exp_avg_sq.{n}" for n in adapters})
        # The rank reports what it holds: the frozen base in fp32, AdamW's two moments of the adapters.
        memory = self.rank_memory("single")
        self.assertEqual(memory[0]["frozen_param_bytes"], 4 * self.base_numel())
        self.assertEqual(memory[0]["optimizer_state_bytes"], 2 * 4 * self.adapter_numel())

    def rank_memory(self, name):
        """Each rank's last line of ranks/rank_R.jsonl, by rank."""
        ranks = os.path.join(self.tmp, name, "ranks")
        out = []
        for r in range(len(os.listdir(ranks))):
            with open(os.path.join(ranks, f"rank_{r}.jsonl")) as f:
                out.append(json.loads(f.read().splitlines()[-1]))
        return out

    def base_numel(self):
        return sum(v.numel() for k, v in self.base_state.items() if not k.endswith("rotary_emb.inv_freq"))

    def adapter_numel(self):
        return sum(v.numel() for v in safetensors_io.load(os.path.join(self.adapter, "adapter_model.safetensors")).values())

    def test_exported_adapters_load_in_peft(self):
        # `tessera export` of a LoRA checkpoint writes PEFT's adapter directory: PeftModel.from_pretrained
        # over the base gives the model peft's own training reached (the same ten steps).
        self.run_tessera("export")
        out = os.path.join(self.tmp, "export_peft")
        done = subprocess.run([TESSERA, "export", os.path.join(self.tmp, "export", "checkpoints"), out],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(out, "adapter_config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["r"], config["lora_alpha"], sorted(config["target_modules"])),
                         (RANK_R, ALPHA, sorted(TARGETS)))
        self.assertEqual(config["base_model_name_or_path"], self.init)
        loaded = peft.PeftModel.from_pretrained(base_llama(self.base_state), out)
        loaded.eval()
        self.trained.eval()
        x = torch.tensor([PROMPT])
        with torch.no_grad():
            got, want = loaded(input_ids=x).logits, self.trained(input_ids=x).logits
        worst = (got - want).abs().max().item()
        print(f"exported adapters in peft vs peft's own training: max abs logit difference {worst:.2e}")
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        with torch.no_grad():
            plain = base_llama(self.base_state)(input_ids=x).logits
        self.assertGreater((plain - got).abs().max().item(), 100 * LOGITS_TOL, "the adapters change the logits")
        # tessera generate reads the adapters over a base: the LoRA checkpoint (its base named in
        # trainer_state.json), or a transformers directory plus the exported PEFT directory. Its logits
        # equal peft's on the same weights.
        base_dir = os.path.join(self.tmp, "base_hf")
        base_llama(self.base_state).save_pretrained(base_dir, safe_serialization=True)
        for name, args in [("checkpoint", [os.path.join(self.tmp, "export", "checkpoints")]),
                           ("base + adapter", [base_dir, "--lora", out])]:
            path = os.path.join(self.tmp, f"logits_{len(args)}.safetensors")
            done = subprocess.run([TESSERA, "generate", *args, "--prompt-ids", ",".join(map(str, PROMPT)),
                                   "--max-new-tokens", "0", "--logits-out", path], capture_output=True, text=True,
                                  env=ENV)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            tessera_logits = safetensors_io.load(path)["logits"]
            worst = (tessera_logits - got[0]).abs().max().item()
            print(f"tessera generate from the {name} vs peft: max abs logit difference {worst:.2e}")
            torch.testing.assert_close(tessera_logits, got[0], rtol=LOGITS_TOL, atol=LOGITS_TOL)

    def test_merged_export_loads_in_transformers(self):
        # `tessera export --merge` writes the base with B·A·alpha/r added to each adapted linear: a
        # transformers model whose logits equal peft's merge_and_unload of the same adapters — over the
        # base the checkpoint names (a safetensors file of tessera names) and over a transformers
        # directory stored in bf16 (given with --base; the merge is computed in fp32).
        self.run_tessera("merge")
        ckpt = os.path.join(self.tmp, "merge", "checkpoints")
        adapters = os.path.join(self.tmp, "merge_peft")
        done = subprocess.run([TESSERA, "export", ckpt, adapters], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        bf16_dir = os.path.join(self.tmp, "base_bf16")
        base_llama(self.base_state).to(torch.bfloat16).save_pretrained(bf16_dir, safe_serialization=True)
        rounded = {k: v.to(torch.bfloat16).float() for k, v in self.base_state.items()}
        x = torch.tensor([PROMPT])
        for name, state, args in [("the checkpoint's base", self.base_state, []),
                                  ("a bf16 transformers base", rounded, ["--base", bf16_dir])]:
            out = os.path.join(self.tmp, f"merged_{len(args)}")
            done = subprocess.run([TESSERA, "export", ckpt, out, "--merge", *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            merged = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
            self.assertEqual(type(merged).__name__, "LlamaForCausalLM")
            want = peft.PeftModel.from_pretrained(base_llama(state), adapters).merge_and_unload().eval()
            with torch.no_grad():
                got, expected = merged(input_ids=x).logits, want(input_ids=x).logits
                plain = base_llama(state)(input_ids=x).logits
            worst = (got - expected).abs().max().item()
            print(f"export --merge over {name} vs peft's merge_and_unload: max abs logit difference {worst:.2e}")
            torch.testing.assert_close(got, expected, rtol=LOGITS_TOL, atol=LOGITS_TOL)
            self.assertGreater((plain - got).abs().max().item(), 100 * LOGITS_TOL, "the merge changes the logits")
        # Misuse is refused by name, before anything is written.
        for args, message in [([ckpt, os.path.join(self.tmp, "m1"), "--base", bf16_dir], "--base: only with --merge"),
                              ([os.path.join(self.tmp, "merge_peft"), os.path.join(self.tmp, "m2"), "--merge"], "merge_peft"),
                              ([ckpt, os.path.join(self.tmp, "m3"), "--merge", "--base", adapters], "the base")]:
            done = subprocess.run([TESSERA, "export", *args], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0, done.stdout)
            self.assertIn(message, done.stderr)
            self.assertFalse(os.path.exists(args[1]) and os.listdir(args[1]), args[1])

    def test_dropout_matches_peft_in_every_layout(self):
        # LoRA dropout: peft's model with lora_dropout 0.25, its dropout modules drawing the masks by
        # tessera's documented rule (docs/fine-tuning.md "Dropout": uniform < 1 − p from a generator
        # seeded by the micro-batch's seed and the linear's weight name, over the whole micro-batch),
        # trains as tessera in one process and with tp=2 (row-parallel inputs split by columns), sp=2
        # (by tokens), pp=2 with recomputation (masks drawn again in backward) and ZeRO-2 at dp=2.
        p = 0.25
        model = lora_model(self.base_state, self.adapter)
        calls = [0]
        for name, module in model.named_modules():
            if isinstance(module, peft.tuners.lora.LoraLayer):
                weight = name.removeprefix("base_model.model.model.") + ".weight"
                module.lora_dropout["default"] = RuleDropout(p, weight, calls)
        model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        want = self.train_reference(model)
        # The test can fail: dropout moves the losses far from the training without it.
        gap = max(abs(a - b) / abs(b) for a, b in zip(want, self.want))
        print(f"dropout {p} moves the losses by up to {gap:.2e}")
        self.assertGreater(gap, 10 * PARALLEL_TOL)
        assert_losses_close(self, "dropout", self.run_tessera("dropout", dropout=p), want, STEPS, SINGLE_TOL)
        for name, sets in [("dropout_tp2", ["parallel.tp=2"]), ("dropout_sp2", ["parallel.sp=2"]),
                           ("dropout_pp2", ["parallel.pp=2", "train.activation_checkpointing=true"]),
                           ("dropout_zero2", ["parallel.dp=2", "parallel.zero_stage=2"])]:
            assert_losses_close(self, name, self.run_tessera(name, sets, dropout=p), want, STEPS, PARALLEL_TOL)

    def test_resumes_from_an_adapter_checkpoint(self):
        self.run_tessera("resume_first", checkpoint_every=5)
        resumed = os.path.join(self.tmp, "resumed")
        os.makedirs(os.path.join(resumed, "checkpoints"))
        # Copied, not linked: a checkpoint that is a symbolic link is not one (it could point into
        # another job's directory).
        shutil.copytree(os.path.join(self.tmp, "resume_first", "checkpoints", "step_00000005"),
                        os.path.join(resumed, "checkpoints", "step_00000005"))
        got = self.run_tessera("resumed")
        self.assertEqual(len(got), STEPS - 5)
        for step, (g, w) in enumerate(zip(got, self.want[5:]), start=6):
            self.assertLessEqual(abs(g - w), SINGLE_TOL * abs(w), f"resumed step {step}")

    def moe_case(self, name, model_class, base, targets, layouts):
        """`base` (a Mixture of Experts, saved) with peft's adapters on `targets`, trained with the balancing
        loss in the objective (coefficient 0.02, the config's): tessera's losses in each of `layouts`
        ((name, sets)) equal peft's training in PyTorch within SINGLE_TOL; returns peft's trained model and
        the base's directory."""
        base_dir = os.path.join(self.tmp, name)
        base.save_pretrained(base_dir, safe_serialization=True)

        def model(adapter=None):
            m = model_class.from_pretrained(base_dir, dtype=torch.float32)
            if adapter:
                return peft.PeftModel.from_pretrained(m, adapter, is_trainable=True)
            torch.manual_seed(9)
            return peft.get_peft_model(m, peft.LoraConfig(r=RANK_R, lora_alpha=ALPHA, target_modules=targets,
                                                          init_lora_weights=False, task_type="CAUSAL_LM"))

        adapter = os.path.join(self.tmp, f"{name}_adapter")
        model().save_pretrained(adapter)
        peft_model = model(adapter)
        peft_model.train()

        class Objective(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x, y):
                out = self.m(input_ids=x, output_router_logits=True)
                ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), y.reshape(-1))
                return ce + 0.02 * out.aux_loss

        samples = gpt_reference.Samples(self.data, SEQ, False, 0)
        with torch.no_grad(), peft_model.disable_adapter():  # The test can fail: the base alone differs.
            base_loss = sum(Objective(peft_model)(*samples.batch(range(a, a + MICRO))).item()
                            for a in range(0, GLOBAL, MICRO)) / (GLOBAL // MICRO)
        want = gpt_reference.train(Objective(peft_model), samples, STEPS, MICRO, GLOBAL, LR, MIN_LR, WARMUP, True, WD,
                                   BETAS, ADAM_EPS, CLIP)
        lora = f"{{rank: {RANK_R}, alpha: {ALPHA}, targets: [{', '.join(targets)}], init_from: {adapter}}}"
        for layout, sets in layouts:
            run = f"{name}_{layout}"
            spec = hf_testing.write_pretrained_spec(self.tmp, run, base_dir, self.data, SEQ, STEPS, MICRO, GLOBAL, LR,
                                                    MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP)
            done = hf_testing.run_tessera(TESSERA, spec, sets + [f"model.lora={lora}"], ENV)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            with open(os.path.join(self.tmp, run, "steps.jsonl")) as f:
                got = [json.loads(line)["loss"] for line in f]
            worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
            print(f"{run}: max relative loss difference {worst:.2e} ({want[0]:.4f} -> {want[-1]:.4f})")
            self.assertEqual(len(got), STEPS)
            self.assertLessEqual(worst, SINGLE_TOL, run)
        print(f"{name}: without the adapters the first step's objective would be {base_loss:.4f}, not {want[0]:.4f}")
        self.assertGreater(abs(base_loss - want[0]), 3 * SINGLE_TOL * abs(want[0]))
        return peft_model, base_dir

    @staticmethod
    def mixtral():
        config = transformers.MixtralConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
            num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.02,
            tie_word_embeddings=False, sliding_window=None, rms_norm_eps=EPS, rope_theta=THETA)
        torch.manual_seed(8)
        return transformers.MixtralForCausalLM(config).float()

    # Held to SINGLE_TOL in every layout (measured below): the adapters move these untrained models'
    # objectives little. (A much larger adapter scale makes the runs chaotic: near-tied router choices
    # flip on rounding differences within a few steps, on both sides alike.)
    def test_mixture_of_experts_attention_adapters_match_peft(self):
        # A MixtralForCausalLM with adapters on the attention's linears; router and experts frozen. One
        # process and ep=2 (experts split over the data-parallel ranks, frozen on each).
        self.moe_case("mixtral", transformers.MixtralForCausalLM, self.mixtral(), ["q_proj", "k_proj", "v_proj", "o_proj"],
                      [("single", []), ("ep2", ["parallel.dp=2", "parallel.ep=2"])])

    def test_mixture_of_experts_expert_adapters_match_peft(self):
        # Adapters on the experts, as peft wraps every expert's linears: Mixtral's w1/w2/w3 (with q and v)
        # in one process, ep=2 (each expert's adapters on its rank, reduced with it) and tp=2 (split like
        # their linears); a Qwen2-MoE with a shared expert and a dense block, adapters on gate/up/down
        # (every expert's, the shared expert's and the dense MLP's) and o_proj, in one process and tp=2.
        # The exported adapter directory loads in peft with the trained model's logits, and the merged
        # export in transformers with peft's merge_and_unload's.
        trained, base_dir = self.moe_case("mixtral_experts", transformers.MixtralForCausalLM, self.mixtral(),
                                   ["q_proj", "v_proj", "w1", "w2", "w3"],
                                   [("single", []), ("ep2", ["parallel.dp=2", "parallel.ep=2"]),
                                    ("tp2", ["parallel.tp=2"])])
        ckpt = os.path.join(self.tmp, "mixtral_experts_single", "checkpoints")
        out, merged_dir = os.path.join(self.tmp, "mixtral_experts_peft"), os.path.join(self.tmp, "mixtral_experts_merged")
        for args in [[ckpt, out], [ckpt, merged_dir, "--merge"]]:
            done = subprocess.run([TESSERA, "export", *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        x = torch.tensor([PROMPT])
        loaded = peft.PeftModel.from_pretrained(
            transformers.MixtralForCausalLM.from_pretrained(base_dir, dtype=torch.float32), out).eval()
        merged = transformers.AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
        with torch.no_grad():
            want = trained.eval()(input_ids=x).logits
            got = loaded(input_ids=x).logits
            merged_logits = merged(input_ids=x).logits
            peft_merged = loaded.merge_and_unload()(input_ids=x).logits
        print(f"mixtral experts: exported adapters vs peft's trained model {(got - want).abs().max().item():.2e}, "
              f"merged export vs merge_and_unload {(merged_logits - peft_merged).abs().max().item():.2e}")
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(merged_logits, peft_merged, rtol=LOGITS_TOL, atol=LOGITS_TOL)
        config = transformers.Qwen2MoeConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=80, moe_intermediate_size=48,
            shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
            mlp_only_layers=[1], decoder_sparse_step=1, use_sliding_window=False, num_hidden_layers=3,
            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
            output_router_logits=True, router_aux_loss_coef=0.02, tie_word_embeddings=False, rms_norm_eps=EPS,
            rope_theta=THETA)
        torch.manual_seed(6)
        self.moe_case("qwen2_moe", transformers.Qwen2MoeForCausalLM, transformers.Qwen2MoeForCausalLM(config).float(),
                      ["o_proj", "gate_proj", "up_proj", "down_proj"], [("single", []), ("tp2", ["parallel.tp=2"])])

    def test_layouts_match_peft(self):
        # Recomputation: the first block's input comes from the frozen embedding (no gradient of its own).
        for name, sets in [("tp2", ["parallel.tp=2"]), ("tp4", ["parallel.tp=4"]), ("pp2", ["parallel.pp=2"]),
                           ("recompute", ["train.activation_checkpointing=true"]),
                           ("sp2", ["parallel.sp=2"]), ("zero2", ["parallel.dp=2", "parallel.zero_stage=2"]),
                           ("zero3_offload", ["parallel.dp=2", "parallel.zero_stage=3", "optimizer.offload=cpu"])]:
            assert_losses_close(self, name, self.run_tessera(name, sets), self.want, STEPS, PARALLEL_TOL)
        # bf16: the frozen base and the adapters in bf16 (fp32 master copies of the adapters only).
        assert_losses_close(self, "bf16", self.run_tessera("bf16", ["train.precision=bf16"]), self.want, STEPS,
                            BF16_TOL)
        # Memory per rank (ranks/rank_R.jsonl): the base is frozen, never in the optimizer — split over
        # tp with its layers, whole on every dp rank (ZeRO shards the adapters' state only); bf16 holds
        # it in 2 bytes and adds fp32 masters of the adapters (12 bytes each with the moments), as does
        # the host-offloaded optimizer.
        base, adapters = 4 * self.base_numel(), 4 * self.adapter_numel()
        tp2 = self.rank_memory("tp2")
        for m in tp2:
            self.assertLess(m["frozen_param_bytes"], 0.6 * base)
        self.assertGreaterEqual(sum(m["frozen_param_bytes"] for m in tp2), base)
        for name, state in [("zero2", 2 * adapters), ("zero3_offload", 3 * adapters)]:
            memory = self.rank_memory(name)
            self.assertEqual([m["frozen_param_bytes"] for m in memory], [base, base], name)
            self.assertEqual(sum(m["optimizer_state_bytes"] for m in memory), state, name)
            self.assertLess(max(m["optimizer_state_bytes"] for m in memory), state, name)
        bf16 = self.rank_memory("bf16")[0]
        self.assertEqual((bf16["frozen_param_bytes"], bf16["optimizer_state_bytes"]), (base // 2, 3 * adapters))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
