"""What the tests against transformers share: the loss of a transformers model as gpt_reference.train
calls it, the token file they train on, non-zero biases for models whose biases start at zero, and
the tessera job that trains a transformers directory as gpt_reference.train does."""
import os
import subprocess

import numpy as np
import torch


class CausalLm(torch.nn.Module):
    """A transformers model as gpt_reference.train calls it: mean cross-entropy of (tokens, targets)."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, x, y):
        logits = self.hf(input_ids=x).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def write_tokens(directory, stride, seed, repeats=300):
    """A noisy ramp 0, stride, 2·stride, ... (mod 256), little-endian uint16; returns its path."""
    rng = np.random.default_rng(seed)
    base = np.tile(np.arange(0, 256, stride, dtype=np.uint16), repeats)
    tokens = (base ^ rng.integers(0, 4, size=base.size).astype(np.uint16)) % 256
    path = os.path.join(directory, "tokens.bin")
    tokens.astype("<u2").tofile(path)
    return path


def with_random_biases(model, std=0.1):
    """Draws the projections' biases (transformers starts them at zero) so that they matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):
                p.normal_(0.0, std)
    return model


def assert_losses_close(test, name, got, want, steps, tol):
    """Per-step losses of tessera (`got`) within `tol` relative of transformers' (`want`), and the
    reference run learns; prints the worst difference."""
    test.assertEqual(len(got), steps)
    for step, (g, w) in enumerate(zip(got, want), start=1):
        test.assertLessEqual(abs(g - w), tol * abs(w), f"{name} step {step}: tessera {g} vs transformers {w}")
    test.assertLess(want[-1], want[0] - 0.1, "the run learns")
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    print(f"{name}: max relative loss difference {worst:.2e} (loss {want[0]:.4f} -> {want[-1]:.4f})")


def write_pretrained_spec(directory, name, model_dir, data, seq, steps, micro, global_batch, lr, min_lr, warmup,
                          weight_decay, betas, eps, clip, extra=""):
    """DIR/NAME.yaml: `model_dir` (model.pretrained) trained as gpt_reference.train trains (cosine LR
    with warmup, AdamW, clipping) into DIR/NAME; `extra` is appended (YAML lines). Returns its path."""
    spec = os.path.join(directory, f"{name}.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: {name}
model: {{pretrained: {model_dir}, seq_len: {seq}}}
data: {{path: {data}}}
train: {{steps: {steps}, micro_batch: {micro}, global_batch: {global_batch}, lr: {lr}, min_lr: {min_lr},
        warmup_steps: {warmup}, schedule: cosine, weight_decay: {weight_decay}, betas: [{betas[0]}, {betas[1]}],
        eps: {eps}, grad_clip: {clip}}}
output_dir: {directory}/{name}
{extra}""")
    return spec


def run_tessera(tessera, spec, sets, env):
    """`tessera run SPEC --quiet --threads-per-rank=1 --set S...` (CompletedProcess, text output)."""
    cmd = [tessera, "run", spec, "--quiet", "--threads-per-rank=1"]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, env=env, capture_output=True, text=True)
