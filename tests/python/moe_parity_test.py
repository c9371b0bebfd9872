"""Mixture of Experts against transformers itself: a MixtralForCausalLM, a Qwen2MoeForCausalLM (shared
expert, norm_topk_prob false, a dense block among sparse ones) and a Qwen3MoeForCausalLM (q/k norms,
renormalised top-k), drawn by transformers with output_router_logits true and router_aux_loss_coef
0.02, written by save_pretrained, trained 10 steps from `model.pretrained` with micro-batches of 2
accumulated to 4 (warmup, cosine LR, weight decay, clipping). Per step, the objective (`loss`:
cross-entropy + 0.02 × balancing loss, transformers' outputs.loss), `lm_loss` and `aux_loss`
(transformers' outputs.aux_loss, load_balancing_loss_func over every sparse block of one forward pass)
equal the same training done in PyTorch on the transformers model: within 1e-4 relative in one
process, 1e-3 with tp=2 (each expert split over tp), dp=2, expert parallelism (ep=2 out of dp=2,
alone, with tp=2, with ZeRO-3, with activation checkpointing), pipelines (pp=2, ep=2 × pp=2, and a
dense block on a stage of its own at pp=3), sequence parallelism (sp=2 ring, all-to-all with ep=2,
with pp=2), grid tensor parallelism (2d, 2.5d, 3d; with pp=2; with ep=2), bf16 (alone and ep=2, within 2e-3 of transformers' fp32 training), and with activation checkpointing (the
balancing loss's gradient enters recomputed blocks). Exports load in transformers with tessera's
logits and generate its tokens. The test can fail: training the same model
without the balancing loss's gradient gives losses far outside the tolerance.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import safetensors.torch
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from hf_testing import run_tessera, write_pretrained_spec, write_tokens  # noqa: E402

TESSERA = os.path.abspath("client/tessera")
RANK = os.path.abspath("worker/rank/tessera-rank")
GENERATE = os.path.abspath("generate/tessera-generate")
ENV = dict(os.environ, TESSERA_RANK_BINARY=RANK, TESSERA_GENERATE_BINARY=GENERATE)
LOGITS_TOL = 1e-5  # Exported weights in transformers against tessera's forward, fp32.
PROMPT = [5, 17, 42, 99, 3, 250, 7]
VOCAB, SEQ = 256, 32
MICRO, GLOBAL, STEPS = 2, 4, 10
LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP = 2e-3, 2e-4, 3, 0.1, (0.9, 0.95), 1e-8, 1.0
COEF = 0.02
SINGLE_TOL = 1e-4    # The bar for one process against transformers.
PARALLEL_TOL = 1e-3  # Sums in another order, amplified by Adam.
BF16_TOL = 2e-3      # As the pipeline suite's bf16 bar: 8 significant bits, averaged over the tokens.


def common(**extra):
    return dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                output_router_logits=True, router_aux_loss_coef=COEF, **extra)


def mixtral():
    config = transformers.MixtralConfig(intermediate_size=96, num_local_experts=4, num_experts_per_tok=2,
                                        sliding_window=None, **common())
    torch.manual_seed(5)
    return transformers.MixtralForCausalLM(config).float()


def qwen2_moe():
    # Block 1 of 3 is dense (mlp_only_layers) with its own width; q, k, v biases drawn non-zero.
    config = transformers.Qwen2MoeConfig(
        intermediate_size=80, moe_intermediate_size=48, shared_expert_intermediate_size=64, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1], decoder_sparse_step=1,
        use_sliding_window=False, **dict(common(), num_hidden_layers=3))
    torch.manual_seed(6)
    model = transformers.Qwen2MoeForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):
                p.normal_(0.0, 0.1)
    return model


def qwen3_moe():
    config = transformers.Qwen3MoeConfig(intermediate_size=80, moe_intermediate_size=48, num_experts=4,
                                         num_experts_per_tok=2, norm_topk_prob=True, head_dim=16,
                                         use_sliding_window=False, **common())
    torch.manual_seed(7)
    model = transformers.Qwen3MoeForCausalLM(config).float()
    with torch.no_grad():  # q/k norm weights start at 1: drawn so that they matter.
        for name, p in model.named_parameters():
            if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


class MoeLm(torch.nn.Module):
    """transformers' outputs.loss (cross-entropy + coef · aux_loss) for gpt_reference.train, keeping
    the cross-entropy and aux_loss of every micro-batch. `aux_gradient` false: the same objective
    value, but the balancing loss is not differentiated (the test's counterfactual)."""

    def __init__(self, hf, aux_gradient=True):
        super().__init__()
        self.hf, self.aux_gradient = hf, aux_gradient
        self.lm, self.aux = [], []

    def forward(self, x, y):
        out = self.hf(input_ids=x, output_router_logits=True)
        logits = out.logits
        lm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        aux = out.aux_loss if self.aux_gradient else out.aux_loss.detach()
        self.lm.append(lm.item())
        self.aux.append(out.aux_loss.item())
        return lm + COEF * aux


class LossFreeMixtral(MoeLm):
    """MoeLm whose Mixtral blocks route with loss-free balancing as docs/models.md defines it (written
    here independently of tessera): per block a bias b added to the softmax probabilities only to
    choose the top-k, the weights the chosen probabilities renormalised; after every optimizer step
    b += rate · sign(mean load − load), load = tokens routed to each expert over the step's
    micro-batches. Block i's forward is transformers' own otherwise (experts in ascending order)."""

    def __init__(self, hf, rate, accum):
        super().__init__(hf)
        self.rate, self.accum, self.calls = rate, accum, 0
        self.blocks = [layer.block_sparse_moe for layer in hf.model.layers]
        self.bias = [torch.zeros(b.num_experts) for b in self.blocks]
        self.load = [torch.zeros(b.num_experts) for b in self.blocks]
        for i, block in enumerate(self.blocks):
            block.forward = self.biased_forward(i, block)

    def biased_forward(self, i, block):
        def forward(hidden_states):
            batch, seq, hidden = hidden_states.shape
            x = hidden_states.view(-1, hidden)
            logits = block.gate(x)
            probs = torch.nn.functional.softmax(logits, dim=1, dtype=torch.float)
            _, chosen = torch.topk(probs + self.bias[i], block.top_k, dim=-1)
            weights = probs.gather(-1, chosen)
            weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
            self.load[i] += torch.bincount(chosen.reshape(-1), minlength=block.num_experts).float()
            out = torch.zeros_like(x)
            for e in range(block.num_experts):
                rows, slots = torch.where(chosen == e)
                out.index_add_(0, rows, block.experts[e](x[rows]) * weights[rows, slots, None])
            return out.view(batch, seq, hidden), logits
        return forward

    def update_bias(self):
        """The update after an optimizer step, from the loads of its micro-batches."""
        for i in range(len(self.blocks)):
            self.bias[i] += self.rate * torch.sign(self.load[i].mean() - self.load[i])
            self.load[i].zero_()

    def forward(self, x, y):
        if self.calls > 0 and self.calls % self.accum == 0:  # The first forward after an optimizer step.
            self.update_bias()
        self.calls += 1
        return super().forward(x, y)


def per_step(values, accum):
    return [sum(values[i:i + accum]) / accum for i in range(0, len(values), accum)]


class MoeParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = write_tokens(cls.tmp, stride=5, seed=11)
        cls.dirs = {}
        for name, make in [("mixtral", mixtral), ("qwen2_moe", qwen2_moe), ("qwen3_moe", qwen3_moe)]:
            d = os.path.join(cls.tmp, name)
            make().save_pretrained(d, safe_serialization=True)
            cls.dirs[name] = d
        cls.want = {}

    def reference(self, name, aux_gradient=True, micro=MICRO):
        key = (name, aux_gradient, micro)
        if key not in self.want:
            hf = transformers.AutoModelForCausalLM.from_pretrained(self.dirs[name], torch_dtype=torch.float32)
            hf.train()
            model = MoeLm(hf, aux_gradient)
            samples = gpt_reference.Samples(self.data, SEQ, False, 0)
            loss = gpt_reference.train(model, samples, STEPS, micro, GLOBAL, LR, MIN_LR, WARMUP, True, WD, BETAS,
                                       ADAM_EPS, CLIP)
            accum = GLOBAL // micro
            self.want[key] = {"loss": loss, "lm_loss": per_step(model.lm, accum), "aux_loss": per_step(model.aux, accum)}
        return self.want[key]

    def run_tessera(self, name, model, sets=(), micro=MICRO):
        spec = write_pretrained_spec(self.tmp, name, self.dirs[model], self.data, SEQ, STEPS, micro, GLOBAL, LR,
                                     MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP, f"checkpoint: {{every_steps: {STEPS}}}\n")
        done = run_tessera(TESSERA, spec, sets, ENV)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        return {k: [line[k] for line in lines] for k in ("loss", "lm_loss", "aux_loss")}

    def check(self, name, model, sets, tol, micro=MICRO):
        got, want = self.run_tessera(name, model, sets, micro), self.reference(model, micro=micro)
        for key in ("loss", "lm_loss", "aux_loss"):
            self.assertEqual(len(got[key]), STEPS, key)
            for step, (g, w) in enumerate(zip(got[key], want[key]), start=1):
                self.assertLessEqual(abs(g - w), tol * abs(w), f"{name} {key} step {step}: tessera {g} vs transformers {w}")
            worst = max(abs(g - w) / abs(w) for g, w in zip(got[key], want[key]))
            print(f"{name} {list(sets)} {key}: max relative difference {worst:.2e} "
                  f"({want[key][0]:.4f} -> {want[key][-1]:.4f})")
        self.assertLess(want["lm_loss"][-1], want["lm_loss"][0] - 0.1, "the run learns")
        return got

    def test_mixtral_single_process_matches_transformers(self):
        got = self.check("mixtral", "mixtral", [], SINGLE_TOL)
        # The test can fail: without the balancing loss's gradient the same run ends elsewhere.
        without = self.reference("mixtral", aux_gradient=False)
        gap = max(abs(g - w) / abs(w) for g, w in zip(got["aux_loss"], without["aux_loss"]))
        self.assertGreater(gap, 10 * SINGLE_TOL, "the balancing loss's gradient changes training")
        print(f"mixtral: without the balancing loss's gradient aux_loss would differ by {gap:.2e}")

    def test_mixtral_tensor_and_data_parallel_match_transformers(self):
        self.check("mixtral_tp2", "mixtral", ["parallel.tp=2"], PARALLEL_TOL)
        self.check("mixtral_dp2", "mixtral", ["parallel.dp=2"], PARALLEL_TOL)

    def test_expert_parallel_matches_transformers(self):
        # Experts split over 2 ranks (ep=2 taken from dp=2): tokens to their experts' ranks and back.
        self.check("mixtral_ep2", "mixtral", ["parallel.dp=2", "parallel.ep=2"], PARALLEL_TOL)
        self.check("mixtral_ep2_tp2", "mixtral", ["parallel.dp=2", "parallel.ep=2", "parallel.tp=2"], PARALLEL_TOL)
        self.check("qwen2_moe_ep2", "qwen2_moe", ["parallel.dp=2", "parallel.ep=2"], PARALLEL_TOL)
        # ZeRO-3: the other parameters sharded over dp, each expert over its own replicas.
        self.check("mixtral_ep2_zero3", "mixtral", ["parallel.dp=2", "parallel.ep=2", "parallel.zero_stage=3"],
                   PARALLEL_TOL)
        # Recomputed blocks exchange their tokens again inside backward, on every ep rank alike.
        self.check("qwen3_moe_ep2_ckpt", "qwen3_moe", ["parallel.dp=2", "parallel.ep=2",
                                                       "train.activation_checkpointing=true"], PARALLEL_TOL)

    def test_grid_tensor_parallel_matches_transformers(self):
        # 2D, 2.5D and 3D: each rank routes the tokens of its samples (the block's input gathered along
        # the grid's hidden axis), each expert split over that axis; the balancing loss's statistics
        # summed over the axes that split the samples. q/k norms (Qwen3) and a shared expert (Qwen2).
        grid2d = ["parallel.tp=4", "parallel.tp_mode=2d"]
        self.check("mixtral_2d", "mixtral", grid2d, PARALLEL_TOL)
        self.check("qwen2_moe_2d", "qwen2_moe", grid2d, PARALLEL_TOL)
        self.check("qwen3_moe_2d_ep2", "qwen3_moe", grid2d + ["parallel.dp=2", "parallel.ep=2"], PARALLEL_TOL)
        # 2.5D (depth 2) and 3D split each micro-batch's samples 4 ways: micro-batches of 4.
        self.check("mixtral_2p5d", "mixtral", ["parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"],
                   PARALLEL_TOL, micro=4)
        self.check("mixtral_3d", "mixtral", ["parallel.tp=8", "parallel.tp_mode=3d"], PARALLEL_TOL, micro=4)
        # With a pipeline: the statistics summed over the sample axes on the last stage.
        self.check("mixtral_2d_pp2", "mixtral", grid2d + ["parallel.pp=2"], PARALLEL_TOL)

    def test_pipelines_match_transformers(self):
        # The balancing loss is joint over both stages' sparse blocks: their statistics travel with the
        # activations and back with the gradients.
        self.check("mixtral_pp2", "mixtral", ["parallel.pp=2"], PARALLEL_TOL)
        self.check("mixtral_ep2_pp2", "mixtral", ["parallel.dp=2", "parallel.ep=2", "parallel.pp=2"], PARALLEL_TOL)
        self.check("qwen2_moe_pp3", "qwen2_moe", ["parallel.pp=3"], PARALLEL_TOL)

    def test_sequence_parallel_matches_transformers(self):
        # Each rank routes its block of the sequence; the balancing loss is over the whole sequence
        # (statistics summed over sp), with pipelines and expert parallelism too.
        self.check("mixtral_sp2", "mixtral", ["parallel.sp=2"], PARALLEL_TOL)
        self.check("mixtral_sp2a_ep2", "mixtral", ["parallel.sp=2", "parallel.sp_mode=all_to_all", "parallel.dp=2",
                                                   "parallel.ep=2"], PARALLEL_TOL)
        self.check("qwen3_moe_sp2_pp2", "qwen3_moe", ["parallel.sp=2", "parallel.pp=2"], PARALLEL_TOL)

    def test_loss_free_balancing_is_its_definition(self):
        # The bias moves by 0.05 a step: enough to change the routing within the 10 steps.
        rate = 0.05
        hf = transformers.AutoModelForCausalLM.from_pretrained(self.dirs["mixtral"], torch_dtype=torch.float32)
        hf.train()
        model = LossFreeMixtral(hf, rate, GLOBAL // MICRO)
        samples = gpt_reference.Samples(self.data, SEQ, False, 0)
        want = gpt_reference.train(model, samples, STEPS, MICRO, GLOBAL, LR, MIN_LR, WARMUP, True, WD, BETAS,
                                   ADAM_EPS, CLIP)
        # The run evaluates after its last step on validation samples 0..GLOBAL-1 of the same file, read in
        # order: the trainer's own evaluation forward, compared with generate's below.
        for name, sets in [("mixtral_bias", ["checkpoint.every_steps=5", f"data.valid_path={self.data}",
                                             "train.eval_batches=1"]),
                           ("mixtral_bias_ep2", ["parallel.dp=2", "parallel.ep=2"])]:
            got = self.run_tessera(name, "mixtral", [f"model.router_bias_rate={rate}"] + sets)["loss"]
            worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
            print(f"{name}: max relative loss difference to the definition {worst:.2e}")
            self.assertLessEqual(worst, PARALLEL_TOL if "parallel.ep=2" in sets else SINGLE_TOL, name)
        # Resumed from step 5 (the biases come back from the checkpoint): steps 6..10 as uninterrupted.
        resumed = os.path.join(self.tmp, "mixtral_bias_resumed")
        shutil.copytree(os.path.join(self.tmp, "mixtral_bias", "checkpoints", "step_00000005"),
                        os.path.join(resumed, "checkpoints", "step_00000005"))
        got = self.run_tessera("mixtral_bias_resumed", "mixtral", [f"model.router_bias_rate={rate}"])["loss"]
        self.assertEqual(len(got), STEPS - 5)
        for g, w in zip(got, want[5:]):
            self.assertLessEqual(abs(g - w), SINGLE_TOL * abs(w), "resumed")
        # Resumed by a spec without loss-free balancing: refused by name, not routed without the biases.
        dropped = os.path.join(self.tmp, "mixtral_bias_dropped")
        shutil.copytree(os.path.join(self.tmp, "mixtral_bias", "checkpoints", "step_00000005"),
                        os.path.join(dropped, "checkpoints", "step_00000005"))
        spec = write_pretrained_spec(self.tmp, "mixtral_bias_dropped", self.dirs["mixtral"], self.data, SEQ, STEPS,
                                     MICRO, GLOBAL, LR, MIN_LR, WARMUP, WD, BETAS, ADAM_EPS, CLIP)
        done = run_tessera(TESSERA, spec, [], ENV)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("router_bias: the checkpoint routes tokens with loss-free balancing's biases",
                      done.stdout + done.stderr)
        # The test can fail: the same run without the bias ends elsewhere.
        plain = self.reference("mixtral")["loss"]
        gap = max(abs(g - w) / abs(w) for g, w in zip(plain, want))
        print(f"without the bias the losses would differ by {gap:.2e}")
        self.assertGreater(gap, 10 * SINGLE_TOL)
        # The biases are in the checkpoint (trainer_state.json), one list per block, after the last step's
        # update too.
        model.update_bias()
        with open(os.path.join(self.tmp, "mixtral_bias", "checkpoints", f"step_{STEPS:08d}", "trainer_state.json")) as f:
            saved = json.load(f)["router_bias"]
        self.assertEqual(len(saved), len(model.bias))
        for got_row, want_row in zip(saved, model.bias):
            self.assertEqual(len(got_row), len(want_row))
            for g, w in zip(got_row, want_row.tolist()):
                self.assertAlmostEqual(g, w, places=5)
        # tessera generate routes with the checkpoint's biases, as training resumes them (issue 62): its prompt
        # logits are the biased forward written here over the checkpoint's own weights, and not the plain one.
        ckpt = os.path.join(self.tmp, "mixtral_bias", "checkpoints")
        path = os.path.join(self.tmp, "mixtral_bias_logits.safetensors")
        prompt = [(7 * i + 3) % VOCAB for i in range(96)]  # Enough tokens that the biases move some of them.
        self.tessera("generate", ckpt, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", "0",
                     "--logits-out", path)
        got = safetensors.torch.load_file(path)["logits"]
        weights = safetensors.torch.load_file(os.path.join(ckpt, f"step_{STEPS:08d}", "model.safetensors"))
        hf = transformers.AutoModelForCausalLM.from_pretrained(self.dirs["mixtral"], torch_dtype=torch.float32)
        hf.load_state_dict({k if k.startswith("lm_head.") else "model." + k: v for k, v in weights.items()})
        hf.eval()
        with torch.no_grad():
            plain = hf(input_ids=torch.tensor([prompt])).logits[0]
            biased_model = LossFreeMixtral(hf, rate, 1)
            biased_model.bias = [torch.tensor(row, dtype=torch.float32) for row in saved]
            biased = hf(input_ids=torch.tensor([prompt])).logits[0]
        worst, gap = (got - biased).abs().max().item(), (got - plain).abs().max().item()
        print(f"generate's logits vs the biased forward {worst:.2e}; vs the plain forward {gap:.2e}")
        torch.testing.assert_close(got, biased, rtol=LOGITS_TOL, atol=LOGITS_TOL)
        self.assertGreater(gap, 10 * LOGITS_TOL, "the biases change these logits (the test can fail)")
        # And generate's forward is the trainer's own (issue 62): the cross-entropy of generate's prompt logits
        # over the validation samples is the val_loss the trainer logged for the same weights and biases.
        with open(os.path.join(self.tmp, "mixtral_bias", "steps.jsonl")) as f:
            val = [json.loads(line) for line in f if "val_loss" in line]
        self.assertEqual(len(val), 1)
        inputs, targets = gpt_reference.Samples(self.data, SEQ, False, 0).batch(range(GLOBAL))
        losses = []
        for k in range(GLOBAL):
            path = os.path.join(self.tmp, f"mixtral_bias_valid_{k}.safetensors")
            self.tessera("generate", ckpt, "--prompt-ids", ",".join(map(str, inputs[k].tolist())), "--max-new-tokens",
                         "0", "--logits-out", path)
            logits = safetensors.torch.load_file(path)["logits"].double()
            losses.append(torch.nn.functional.cross_entropy(logits, targets[k]).item())
        from_generate = sum(losses) / GLOBAL
        print(f"generate's validation loss {from_generate:.8f}, the trainer's {val[0]['val_loss']:.8f}")
        self.assertLessEqual(abs(from_generate - val[0]["val_loss"]), LOGITS_TOL * abs(val[0]["val_loss"]))
        # The export has no place for the biases: refused by name, not written to route otherwise.
        done = subprocess.run([TESSERA, "export", ckpt, os.path.join(self.tmp, "mixtral_bias_hf")], env=ENV,
                              capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("router_bias", done.stderr)

    def test_router_jitter_is_the_same_noise_in_every_layout(self):
        # Random noise cannot match transformers' draws; what it must do: change training (it is applied),
        # and draw the same noise for the same micro-batch whatever the layout (dp, sp, ep, pp,
        # activation checkpointing's recomputation), so those runs equal the one-process run.
        # Held to SINGLE_TOL: layouts differ by ~1e-7 (sums in another order), other noise by far more.
        jitter = ["model.router_jitter=0.5"]
        single = self.run_tessera("mixtral_jitter", "mixtral", jitter)["loss"]
        plain = self.reference("mixtral")["loss"]
        effect = max(abs(g - w) / abs(w) for g, w in zip(single, plain))
        print(f"router jitter changes the losses by {effect:.2e}")
        self.assertGreater(effect, 3 * SINGLE_TOL)
        for name, sets in [("dp2", ["parallel.dp=2"]), ("sp2", ["parallel.sp=2"]),
                           ("ep2_pp2", ["parallel.dp=2", "parallel.ep=2", "parallel.pp=2"]),
                           ("2d", ["parallel.tp=4", "parallel.tp_mode=2d"]),
                           ("ckpt", ["train.activation_checkpointing=true"])]:
            got = self.run_tessera(f"mixtral_jitter_{name}", "mixtral", jitter + sets)["loss"]
            worst = max(abs(g - w) / abs(w) for g, w in zip(got, single))
            print(f"router jitter {name}: max relative difference to one process {worst:.2e}")
            self.assertLessEqual(worst, SINGLE_TOL, name)

    def test_bf16_follows_transformers_fp32(self):
        # bf16 parameters and activations (fp32 master weights, router softmax in fp32): within BF16_TOL
        # of transformers' fp32 training, alone and with ep=2.
        for name, sets in [("mixtral_bf16", []), ("mixtral_bf16_ep2", ["parallel.dp=2", "parallel.ep=2"])]:
            got, want = self.run_tessera(name, "mixtral", ["train.precision=bf16"] + sets), self.reference("mixtral")
            for key in ("loss", "lm_loss", "aux_loss"):
                worst = max(abs(g - w) / abs(w) for g, w in zip(got[key], want[key]))
                print(f"{name} {key}: max relative difference to fp32 {worst:.2e}")
                self.assertLessEqual(worst, BF16_TOL, key)

    def test_mixtral_activation_checkpointing_matches_transformers(self):
        self.check("mixtral_ckpt", "mixtral", ["train.activation_checkpointing=true"], PARALLEL_TOL)

    def test_qwen2_moe_shared_expert_matches_transformers(self):
        self.check("qwen2_moe", "qwen2_moe", [], SINGLE_TOL)
        self.check("qwen2_moe_tp2", "qwen2_moe", ["parallel.tp=2"], PARALLEL_TOL)

    def test_qwen3_moe_matches_transformers(self):
        self.check("qwen3_moe", "qwen3_moe", [], SINGLE_TOL)
        self.check("qwen3_moe_tp2", "qwen3_moe", ["parallel.tp=2"], PARALLEL_TOL)

    def tessera(self, *args):
        done = subprocess.run([TESSERA, *args], env=ENV, capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return done

    def test_exports_load_in_transformers_with_tesseras_logits_and_generation(self):
        # Checkpoints trained with tp=2 (every expert split over two ranks), exported: transformers'
        # from_pretrained gives tessera's logits, and greedy generation agrees on both sides.
        for model in ("mixtral", "qwen2_moe", "qwen3_moe"):
            with self.subTest(model=model):
                name = f"export_{model}"
                self.run_tessera(name, model, ["parallel.tp=2"])
                ckpt = os.path.join(self.tmp, name, "checkpoints")
                out = os.path.join(self.tmp, f"{name}_hf")
                self.tessera("export", ckpt, out)
                with open(os.path.join(out, "config.json")) as f:
                    self.assertEqual(json.load(f)["model_type"], model)
                path = os.path.join(self.tmp, f"{name}_logits.safetensors")
                self.tessera("generate", ckpt, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "0",
                             "--logits-out", path)
                want = safetensors.torch.load_file(path)["logits"]
                hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
                with torch.no_grad():
                    got = hf(input_ids=torch.tensor([PROMPT])).logits[0].float()
                worst = (got - want).abs().max().item()
                print(f"{model}: exported model's logits vs tessera's: max abs difference {worst:.2e}")
                torch.testing.assert_close(got, want, rtol=LOGITS_TOL, atol=LOGITS_TOL)
                tokens = hf.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                                     max_new_tokens=12, do_sample=False, pad_token_id=0)[0, len(PROMPT):].tolist()
                for source in (ckpt, out):
                    done = self.tessera("generate", source, "--prompt-ids", ",".join(map(str, PROMPT)),
                                        "--max-new-tokens", "12", "--json")
                    self.assertEqual(json.loads(done.stdout)["tokens"], tokens, source)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    print(f"{result.testsRun - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
