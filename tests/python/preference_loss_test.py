"""The per-pair losses of parallel/objectives/preference_loss.h against TRL 0.24's own code:
DPOTrainer.dpo_loss (sigmoid with and without label smoothing, ipo; losses, rewards and the gradients of
their mean) and RewardTrainer.compute_loss (with and without margins and the centring term), on random
log-probabilities and scores — in float64, to 1e-12."""
import json
import os
import subprocess
import types
import unittest

import torch
import torch.nn.functional as F
from trl import DPOTrainer
from trl.trainer.dpo_config import FDivergenceType

TOOL = os.path.abspath("parallel/objectives/preference_loss_tool")


def tessera(case):
    r = subprocess.run([TOOL], input=json.dumps(case), capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def trl_dpo(case):
    """TRL's DPOTrainer.dpo_loss, called on a stand-in for the trainer with the attributes it reads."""
    this = types.SimpleNamespace(beta=case["beta"], label_smoothing=case.get("label_smoothing", 0.0),
                                 f_divergence_type=FDivergenceType.REVERSE_KL, f_divergence_params=None,
                                 reference_free=False, accelerator=types.SimpleNamespace(device="cpu"))
    t = {k: torch.tensor(case[k], dtype=torch.float64, requires_grad=k in ("chosen", "rejected"))
         for k in ("chosen", "rejected", "ref_chosen", "ref_rejected")}
    losses, cr, rr = DPOTrainer.dpo_loss(this, t["chosen"], t["rejected"], t["ref_chosen"], t["ref_rejected"],
                                         loss_type=case["type"])
    losses.mean().backward()
    return losses, cr, rr, t["chosen"].grad, t["rejected"].grad


def trl_reward(case):
    """RewardTrainer.compute_loss's loss, with a model whose logits are the given scores."""
    from trl import RewardTrainer
    scores = torch.tensor(case["chosen"] + case["rejected"], dtype=torch.float64, requires_grad=True)
    this = types.SimpleNamespace(
        model=types.SimpleNamespace(training=False),
        args=types.SimpleNamespace(center_rewards_coefficient=case.get("center_coefficient")),
        accelerator=types.SimpleNamespace(gather_for_metrics=lambda x: x, gather=lambda x: x),
        _metrics={"eval": __import__("collections").defaultdict(list)}, _total_train_tokens=0)
    inputs = {"attention_mask": torch.ones(2 * len(case["chosen"]), 1)}
    if "margin" in case:
        inputs["margin"] = torch.tensor(case["margin"], dtype=torch.float64)
    model = lambda **kw: types.SimpleNamespace(logits=scores.unsqueeze(-1))  # noqa: E731
    loss = RewardTrainer.compute_loss(this, model, inputs)
    loss.backward()
    n = len(case["chosen"])
    return loss, scores.grad[:n], scores.grad[n:]


class PreferenceLossTest(unittest.TestCase):
    def assertClose(self, got, want, what):
        want = torch.as_tensor(want, dtype=torch.float64).flatten().tolist()
        got = [got] if isinstance(got, float) else got
        self.assertEqual(len(got), len(want), what)
        for g, w in zip(got, want):
            self.assertAlmostEqual(g, w, delta=1e-12 * max(1.0, abs(w)), msg=what)

    def test_dpo_matches_trl(self):
        g = torch.Generator().manual_seed(7)
        for loss_type, beta, ls in [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.2), ("ipo", 0.1, 0.0),
                                    ("ipo", 0.7, 0.0)]:
            n = 9
            case = {"kind": "dpo", "type": loss_type, "beta": beta, "label_smoothing": ls}
            for k in ("chosen", "rejected", "ref_chosen", "ref_rejected"):
                case[k] = (torch.randn(n, generator=g, dtype=torch.float64) * 20 - 40).tolist()
            got = tessera(case)
            losses, cr, rr, gc, gr = trl_dpo(case)
            what = f"{loss_type} beta {beta} ls {ls}"
            self.assertClose(got["losses"], losses.detach(), what + ": losses")
            self.assertClose(got["loss"], losses.mean().item(), what + ": loss")
            self.assertClose(got["chosen_rewards"], cr, what + ": chosen rewards")
            self.assertClose(got["rejected_rewards"], rr, what + ": rejected rewards")
            self.assertClose(got["grad_chosen"], gc, what + ": d loss / d chosen")
            self.assertClose(got["grad_rejected"], gr, what + ": d loss / d rejected")

    def test_reward_matches_trl(self):
        g = torch.Generator().manual_seed(11)
        for margin, center in [(False, None), (True, None), (False, 0.01), (True, 0.3)]:
            n = 7
            case = {"kind": "reward", "chosen": torch.randn(n, generator=g, dtype=torch.float64).tolist(),
                    "rejected": torch.randn(n, generator=g, dtype=torch.float64).tolist()}
            if margin:
                case["margin"] = torch.rand(n, generator=g, dtype=torch.float64).tolist()
            if center is not None:
                case["center_coefficient"] = center
            got = tessera(case)
            loss, gc, gr = trl_reward(case)
            what = f"margin {margin} center {center}"
            self.assertClose(got["loss"], loss.item(), what + ": loss")
            self.assertClose(got["grad_chosen"], gc, what + ": d loss / d chosen")
            self.assertClose(got["grad_rejected"], gr, what + ": d loss / d rejected")
            # The per-pair losses TRL does not show: their mean is its loss (above); each is the definition.
            t = {k: torch.tensor(v, dtype=torch.float64) for k, v in case.items() if isinstance(v, list)}
            d = t["chosen"] - t["rejected"]
            if margin:
                d = d - t["margin"]
            per = -F.logsigmoid(d)
            if center:
                per = per + center * (t["chosen"] + t["rejected"]) ** 2
            self.assertClose(got["losses"], per, what + ": per-pair losses")


if __name__ == "__main__":
    unittest.main()
