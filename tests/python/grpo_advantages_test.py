"""GRPO's advantages (rewards/advantages.h) against TRL 0.24's own GRPOTrainer: a real GRPOTrainer on a
tiny Llama whose generation is replaced by given completions (its `_generate`), with reward functions
that return given numbers (None where a function gives no reward), run through its own
_generate_and_score_completions — the weighted nansum, the group means, the group or batch standard
deviation, the scaling, and the metrics it logs (reward, reward_std, frac_reward_zero_std, each
function's mean and std). Seeded random cases for every scale_rewards, with weights, missing rewards
and groups of equal rewards; to 1e-5 relative (TRL computes in float32, tessera in float64)."""
import math
import os
import random
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_testing import grpo_trainer, run_tool, small_tokenizer  # noqa: E402

TOOL = os.path.abspath("rewards/advantages_tool")
TOL = 1e-5


def tessera(case):
    return run_tool(TOOL, case)


class TrlScorer:
    """A GRPOTrainer for `functions` reward functions, whose completions and rewards each case sets."""

    def __init__(self, tmp, tokenizer, completions, group, scale, weights, functions):
        self.values = [[] for _ in range(functions)]

        def make(f):
            def reward(prompts, completions, **kwargs):
                return list(self.values[f])
            reward.__name__ = f"f{f}"
            return reward

        self.trainer = grpo_trainer(tmp, tokenizer, [make(f) for f in range(functions)], num_generations=group,
                                    per_device_train_batch_size=completions, scale_rewards=scale,
                                    reward_weights=weights, max_completion_length=4)
        self.completions = completions

    def run(self, per_function):
        for f, values in enumerate(per_function):
            self.values[f] = [None if v is None else float(v) for v in values]
        n = self.completions
        self.trainer._generate = lambda prompts, images: ([[5, 6]] * n, [[7, 8, 9]] * n, 3 * n, None, {})
        self.trainer._metrics["train"].clear()
        self.trainer.model.train()
        out = self.trainer._generate_and_score_completions([{"prompt": "a b"}] * n)
        metrics = {k: v[-1] for k, v in self.trainer._metrics["train"].items()}
        return out["advantages"].tolist(), metrics


def close(test, got, want, what):
    if want is None or (isinstance(want, float) and math.isnan(want)):
        test.assertIsNone(got, what)
        return
    test.assertIsNotNone(got, what)
    test.assertLessEqual(abs(got - want), TOL * max(1.0, abs(want)), f"{what}: tessera {got} vs TRL {want}")


class GrpoAdvantagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.tokenizer = small_tokenizer()

    def test_random_cases_equal_trl(self):
        rng = random.Random(11)
        checked = 0
        for scale in ("group", "batch", "none"):
            for group, groups, functions in [(2, 3, 1), (4, 2, 2), (3, 2, 3)]:
                n = group * groups
                weights = [round(rng.uniform(-1, 2), 3) for _ in range(functions)]
                scorer = TrlScorer(self.tmp, self.tokenizer, n, group, scale, weights, functions)
                for _ in range(3):
                    per = []
                    for f in range(functions):
                        # Integer rewards make groups of equal rewards (zero std) likely; some missing.
                        per.append([None if f > 0 and rng.random() < 0.3 else float(rng.randint(0, 2))
                                    for _ in range(n)])
                    want_adv, metrics = scorer.run(per)
                    got = tessera({"per_function": per, "group_size": group, "scale": scale, "weights": weights})
                    name = f"{scale} G={group} x{groups} functions={functions} {per}"
                    for c, (g, w) in enumerate(zip(got["advantages"], want_adv)):
                        close(self, g, w, f"{name}: advantage {c}")
                    close(self, got["reward"], metrics["reward"], f"{name}: reward")
                    close(self, got["reward_std"], metrics["reward_std"], f"{name}: reward_std")
                    close(self, got["frac_reward_zero_std"], metrics["frac_reward_zero_std"], f"{name}: frac zero std")
                    for f in range(functions):
                        close(self, got["function_mean"][f], metrics[f"rewards/f{f}/mean"], f"{name}: f{f} mean")
                        close(self, got["function_std"][f], metrics[f"rewards/f{f}/std"], f"{name}: f{f} std")
                    checked += 1
        print(f"{checked} cases equal to TRL's GRPOTrainer")

    def test_the_test_can_fail(self):
        # The population standard deviation instead of the unbiased one gives other advantages than TRL's.
        per = [[0.0, 1.0, 1.0, 3.0]]
        want, _ = TrlScorer(self.tmp, self.tokenizer, 4, 4, "group", None, 1).run(per)
        mean = sum(per[0]) / 4
        population = math.sqrt(sum((r - mean) ** 2 for r in per[0]) / 4)
        wrong = [(r - mean) / (population + 1e-4) for r in per[0]]
        self.assertGreater(max(abs(a - b) for a, b in zip(wrong, want)), 100 * TOL)
        got = tessera({"per_function": per, "group_size": 4, "scale": "group"})
        for g, w in zip(got["advantages"], want):
            close(self, g, w, "advantage")

    def test_bad_input_is_refused(self):
        self.assertIn("not whole groups", tessera({"per_function": [[1, 2, 3]], "group_size": 2})["error"])


if __name__ == "__main__":
    unittest.main()
