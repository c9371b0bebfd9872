"""GRPO's loss (parallel/objectives/grpo_loss.h) against TRL 0.24's own GRPOTrainer._compute_loss: a real
GRPOTrainer on a tiny Llama whose per-token log-probabilities are replaced by given ones (its
_get_per_token_logps_and_entropies), so that TRL's own code computes the ratio, the clipping, the KL
term, each loss type's normalisation and the metrics it logs (kl, clip_ratio/low_mean, high_mean,
region_mean). Seeded random cases — padded completions, positive and negative advantages, old
log-probabilities far enough from the policy's for the clip to act (num_iterations > 1) or none (the
policy's own, num_iterations 1), β 0 and 0.04, ε_high apart from ε — for every loss type; the loss and its
gradient in the log-probabilities to 1e-6 relative (TRL in float32, tessera in float64)."""
import math
import os
import random
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_testing import grpo_trainer, run_tool, small_tokenizer  # noqa: E402

TOOL = os.path.abspath("parallel/objectives/grpo_loss_tool")
TOL = 1e-6
MAX_COMPLETION = 6


def tessera(case):
    return run_tool(TOOL, case)


def trl_trainer(tmp, tokenizer, loss_type, beta, epsilon, epsilon_high):
    def zero(prompts, completions, **kwargs):
        return [0.0] * len(completions)
    trainer = grpo_trainer(tmp, tokenizer, [zero], num_generations=2, per_device_train_batch_size=4,
                           loss_type=loss_type, beta=0.0, epsilon=epsilon, epsilon_high=epsilon_high,
                           max_completion_length=MAX_COMPLETION)
    # β set after construction: TRL would load a reference model by name, which the loss never calls
    # here (the reference's log-probabilities are given).
    trainer.beta = beta
    trainer.current_gradient_accumulation_steps = 1  # tessera's value is TRL's before that division.
    trainer.model.train()
    return trainer


def trl_loss(trainer, case):
    """TRL's loss, d loss / d logps and metrics of `case` (the tool's JSON)."""
    logps = torch.tensor(case["logps"], dtype=torch.float32, requires_grad=True)
    mask = torch.tensor(case["mask"], dtype=torch.float32)
    b, t = logps.shape
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros(b, t))
    inputs = {"prompt_ids": torch.ones(b, 2, dtype=torch.long), "prompt_mask": torch.ones(b, 2, dtype=torch.long),
              "completion_ids": torch.ones(b, t, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": torch.tensor(case["advantages"], dtype=torch.float32),
              "num_items_in_batch": torch.tensor(case.get("normalizer", 1.0))}
    if "old_logps" in case:
        inputs["old_per_token_logps"] = torch.tensor(case["old_logps"], dtype=torch.float32)
    if "ref_logps" in case:
        inputs["ref_per_token_logps"] = torch.tensor(case["ref_logps"], dtype=torch.float32)
    trainer._metrics["train"].clear()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return loss.item(), logps.grad.tolist(), metrics


def random_case(rng, loss_type, beta, epsilon, epsilon_high, old):
    b = rng.choice([2, 4])
    lengths = [rng.randint(1, MAX_COMPLETION) for _ in range(b)]
    mask = [[1.0 if j < n else 0.0 for j in range(MAX_COMPLETION)] for n in lengths]
    logps = [[round(-rng.uniform(0.05, 4.0), 4) for _ in range(MAX_COMPLETION)] for _ in range(b)]
    case = {"type": loss_type, "beta": beta, "epsilon": epsilon, "epsilon_high": epsilon_high,
            "max_completion_tokens": MAX_COMPLETION, "logps": logps, "mask": mask,
            "advantages": [round(rng.uniform(-2, 2), 4) for _ in range(b)],
            "normalizer": float(sum(lengths)) * rng.choice([1.0, 1.5])}
    if old:  # Ratios from ~0.5 to ~2: inside and outside the clip range.
        case["old_logps"] = [[round(v + rng.uniform(-0.7, 0.7), 4) for v in row] for row in logps]
    if beta:
        case["ref_logps"] = [[round(v + rng.uniform(-0.5, 0.5), 4) for v in row] for row in logps]
    return case


class GrpoLossTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.tokenizer = small_tokenizer()

    def close(self, got, want, what, tol=TOL):
        self.assertLessEqual(abs(got - want), tol * max(1.0, abs(want)), f"{what}: tessera {got} vs TRL {want}")

    def test_random_cases_equal_trl(self):
        rng = random.Random(5)
        checked = 0
        for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
            for beta, epsilon, epsilon_high in [(0.0, 0.2, 0.2), (0.04, 0.2, 0.28)]:
                trainer = trl_trainer(self.tmp, self.tokenizer, loss_type, beta, epsilon, epsilon_high)
                for old in (False, True, True):
                    case = random_case(rng, loss_type, beta, epsilon, epsilon_high, old)
                    want_loss, want_grad, metrics = trl_loss(trainer, case)
                    got = tessera(case)
                    name = f"{loss_type} beta={beta} eps={epsilon}/{epsilon_high} old={old}"
                    # TRL computes in float32: its loss and gradients to ~1e-7 relative of their scale.
                    self.close(got["loss"], want_loss, f"{name}: loss")
                    scale = max(1.0, max(abs(g) for row in want_grad for g in row))
                    for row_got, row_want in zip(got["grad"], want_grad):
                        for g, w in zip(row_got, row_want):
                            self.assertLessEqual(abs(g - w), TOL * scale, f"{name}: gradient {g} vs {w}")
                    self.close(got["clip_ratio"], metrics["clip_ratio/region_mean"], f"{name}: clip_ratio")
                    self.close(got["low_clip"], metrics["clip_ratio/low_mean"], f"{name}: low_clip")
                    self.close(got["high_clip"], metrics["clip_ratio/high_mean"], f"{name}: high_clip")
                    if beta:
                        self.close(got["kl"], metrics["kl"], f"{name}: kl")
                    else:
                        self.assertNotIn("kl", got)
                    checked += 1
        print(f"{checked} cases equal to TRL's GRPOTrainer._compute_loss")

    def test_the_test_can_fail(self):
        # The clip ignored (ratio·A alone) gives another loss than TRL's where a ratio leaves the range.
        rng = random.Random(9)
        trainer = trl_trainer(self.tmp, self.tokenizer, "bnpo", 0.0, 0.2, 0.2)
        case = random_case(rng, "bnpo", 0.0, 0.2, 0.2, old=True)
        want, _, metrics = trl_loss(trainer, case)
        self.assertGreater(metrics["clip_ratio/region_mean"], 0, "the case clips something")
        unclipped, tokens = 0.0, 0.0
        for lp, old, m, a in zip(case["logps"], case["old_logps"], case["mask"], case["advantages"]):
            for x, y, k in zip(lp, old, m):
                unclipped += -math.exp(x - y) * a * k
                tokens += k
        self.assertGreater(abs(unclipped / tokens - want), 100 * TOL)
        self.close(tessera(case)["loss"], want, "loss")


if __name__ == "__main__":
    unittest.main()
