"""Expert parallelism after the router has collapsed (issue 54): a Mixtral whose routers send every
token to experts 0 and 1 (top-2 of 4: the ep rank holding experts 2 and 3 receives no rows, and those
experts no tokens), or to expert 3 alone (top-1: the other ep rank receives nothing, three experts
idle), trained 10 steps by tessera in one process, with dp=2 × ep=2, and with dp=2 × ep=2 × tp=2
(the planner's first choice for examples/mixtral-tiny.yaml on 4 ranks) — the top-1 case also with
ZeRO-3, activation checkpointing, pp=2, sp=2 (all-to-all), a 2D grid and bf16 — each against the same
training in transformers (moe_parity_test's reference and tolerances: 1e-4 relative in one process,
1e-3 in parallel, 2e-3 in bf16) and against tessera's one-process run.

The routing is forced through the weights, not a hook: hidden feature 0 of every token is a constant
(the embeddings' column 0 is 0.5, and no attention or expert output writes to it), so after RMSNorm
it dominates the router's input; the routers read it with +3 for the chosen experts and -3 for the
others. The collapse is checked, not assumed: steps.jsonl's expert_imbalance (busiest expert / mean)
is 2 (two of four experts share every token) or 4 (one expert takes them all) at every step.
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
import moe_parity_test as parity  # noqa: E402
from hf_testing import run_tessera, write_pretrained_spec, write_tokens  # noqa: E402

CONSTANT = 0.5  # Hidden feature 0 of every token's residual stream.
STEER = 3.0     # The routers' weight on it: + for the chosen experts, - for the others.
LAYOUTS = [("single", [], parity.SINGLE_TOL),
           ("dp2_ep2", ["parallel.dp=2", "parallel.ep=2"], parity.PARALLEL_TOL),
           ("dp2_ep2_tp2", ["parallel.dp=2", "parallel.ep=2", "parallel.tp=2"], parity.PARALLEL_TOL)]
EP2 = ["parallel.dp=2", "parallel.ep=2"]
# The other layouts that carry expert rows between ranks: experts sharded by ZeRO-3 over their replicas,
# recomputed blocks exchanging their rows again inside backward, a pipeline, sequence parallelism's
# all-to-all, the 2D grid (rows of the grid's hidden axis), and bf16 rows.
MORE_LAYOUTS = [("dp2_ep2_zero3", EP2 + ["parallel.zero_stage=3"], parity.PARALLEL_TOL),
                ("dp2_ep2_ckpt", EP2 + ["train.activation_checkpointing=true"], parity.PARALLEL_TOL),
                ("dp2_ep2_pp2", EP2 + ["parallel.pp=2"], parity.PARALLEL_TOL),
                ("dp2_ep2_sp2a", EP2 + ["parallel.sp=2", "parallel.sp_mode=all_to_all"], parity.PARALLEL_TOL),
                ("dp2_ep2_2d", EP2 + ["parallel.tp=4", "parallel.tp_mode=2d"], parity.PARALLEL_TOL),
                ("dp2_ep2_bf16", EP2 + ["train.precision=bf16"], parity.BF16_TOL)]


def collapsed_mixtral(chosen, k):
    """A transformers Mixtral (moe_parity_test's sizes, 4 experts, top-k) whose routers pick `chosen`."""
    config = transformers.MixtralConfig(intermediate_size=96, num_local_experts=4, num_experts_per_tok=k,
                                        sliding_window=None, **parity.common())
    torch.manual_seed(5)
    model = transformers.MixtralForCausalLM(config).float()
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = CONSTANT
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0
            moe = layer.block_sparse_moe
            for expert in moe.experts:
                expert.w2.weight[0, :] = 0
            moe.gate.weight[:, 0] = torch.tensor([STEER if e in chosen else -STEER for e in range(4)])
    return model


class MoeCollapseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = write_tokens(cls.tmp, stride=5, seed=11)

    def reference(self, model_dir):
        hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        hf.train()
        model = parity.MoeLm(hf)
        samples = gpt_reference.Samples(self.data, parity.SEQ, False, 0)
        loss = gpt_reference.train(model, samples, parity.STEPS, parity.MICRO, parity.GLOBAL, parity.LR,
                                   parity.MIN_LR, parity.WARMUP, True, parity.WD, parity.BETAS, parity.ADAM_EPS,
                                   parity.CLIP)
        accum = parity.GLOBAL // parity.MICRO
        return {"loss": loss, "lm_loss": parity.per_step(model.lm, accum), "aux_loss": parity.per_step(model.aux, accum)}

    def run_tessera(self, name, model_dir, sets):
        spec = write_pretrained_spec(self.tmp, name, model_dir, self.data, parity.SEQ, parity.STEPS, parity.MICRO,
                                     parity.GLOBAL, parity.LR, parity.MIN_LR, parity.WARMUP, parity.WD, parity.BETAS,
                                     parity.ADAM_EPS, parity.CLIP)
        done = run_tessera(parity.TESSERA, spec, sets, parity.ENV)
        self.assertEqual(done.returncode, 0, done.stdout[-3000:] + done.stderr[-3000:])
        with open(os.path.join(self.tmp, name, "steps.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        return {k: [line[k] for line in lines] for k in ("loss", "lm_loss", "aux_loss", "expert_imbalance")}

    def check_collapsed(self, name, chosen, k, imbalance, layouts=LAYOUTS):
        model_dir = os.path.join(self.tmp, name)
        collapsed_mixtral(chosen, k).save_pretrained(model_dir, safe_serialization=True)
        want = self.reference(model_dir)
        self.assertLess(want["lm_loss"][-1], want["lm_loss"][0] - 0.1, "the run learns")
        single = None
        for layout, sets, tol in layouts:
            with self.subTest(layout=layout):
                got = self.run_tessera(f"{name}_{layout}", model_dir, sets)
                # The test can fail: the routing is the collapsed one at every step.
                self.assertEqual(got["expert_imbalance"], [imbalance] * parity.STEPS, "routing collapsed")
                for key in ("loss", "lm_loss", "aux_loss"):
                    self.assertEqual(len(got[key]), parity.STEPS, key)
                    for step, (g, w) in enumerate(zip(got[key], want[key]), start=1):
                        self.assertLessEqual(abs(g - w), tol * abs(w),
                                             f"{name} {layout} {key} step {step}: tessera {g} vs transformers {w}")
                    worst = max(abs(g - w) / abs(w) for g, w in zip(got[key], want[key]))
                    print(f"{name} {layout} {key}: max relative difference {worst:.2e} "
                          f"({want[key][0]:.4f} -> {want[key][-1]:.4f})")
                if single is None:
                    single = got
                else:
                    worst = max(abs(g - w) / abs(w) for g, w in zip(got["loss"], single["loss"]))
                    print(f"{name} {layout}: max relative loss difference to one process {worst:.2e}")
                    self.assertLessEqual(worst, max(tol, parity.PARALLEL_TOL))

    def test_every_token_on_two_of_four_experts(self):
        # Top-2 on experts 0 and 1: ep rank 1 (experts 2, 3) receives no rows, in forward and backward.
        self.check_collapsed("top2_on_0_1", chosen={0, 1}, k=2, imbalance=2.0)

    def test_every_token_on_one_expert(self):
        # Top-1 on expert 3: ep rank 0 (experts 0, 1) receives no rows; experts 0, 1, 2 get no tokens.
        self.check_collapsed("top1_on_3", chosen={3}, k=1, imbalance=4.0)

    def test_every_token_on_one_expert_in_every_layout_that_moves_expert_rows(self):
        self.check_collapsed("top1_on_3_more", chosen={3}, k=1, imbalance=4.0, layouts=LAYOUTS[:1] + MORE_LAYOUTS)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = {getattr(test, "test_case", test).id() for test, _ in result.failures + result.errors}
    print(f"{result.testsRun - len(failed)} passed, {len(failed)} failed")
    sys.exit(0 if result.wasSuccessful() else 1)
