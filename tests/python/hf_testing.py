"""What the tests against transformers share: the loss of a transformers model as gpt_reference.train
calls it, the token file they train on, and non-zero biases for models whose biases start at zero."""
import os

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
