"""An independent PyTorch GPT-2 and training loop, written from the spec in docs/ (not from tessera's
C++), used as the reference that tessera's losses must match."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden, heads, approximate="none"):
        super().__init__()
        self.heads = heads
        self.approximate = approximate  # GELU: "none" (erf) or "tanh" (GPT-2's gelu_new).
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(hidden, 3 * hidden)
        self.attn.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate=self.approximate))


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, vocab, seq_len, approximate="none"):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.h = nn.ModuleList(Block(hidden, heads, approximate) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:t]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # Tied LM head.
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def gpt2_init(self, layers, generator):
        """GPT-2 init: normal(0, 0.02) weights, zero biases, unit norms, residual projections 0.02/sqrt(2L)."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * layers), generator=generator)
                elif name.endswith(".weight") and p.dim() >= 2:
                    p.normal_(0.0, 0.02, generator=generator)
                elif "ln" in name and name.endswith(".weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()


def splitmix_permutation(n, seed):
    """docs/data-format.md: Fisher-Yates from the back with SplitMix64 draws."""
    mask = (1 << 64) - 1
    state = seed & mask
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        j = z % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


class Samples:
    def __init__(self, path, seq_len, shuffle, seed):
        self.tokens = np.fromfile(path, dtype=np.uint16).astype(np.int64)
        self.seq_len = seq_len
        self.windows = (len(self.tokens) - 1) // seq_len
        self.shuffle, self.seed, self.cache = shuffle, seed, {}

    def window(self, g):
        e, i = divmod(g, self.windows)
        if not self.shuffle:
            return i
        if e not in self.cache:
            self.cache = {e: splitmix_permutation(self.windows, self.seed + e)}
        return self.cache[e][i]

    def batch(self, indices):
        rows = [self.tokens[self.window(g) * self.seq_len:][: self.seq_len + 1] for g in indices]
        t = torch.from_numpy(np.stack(rows))
        return t[:, :-1], t[:, 1:]


def lr_at(step, lr, min_lr, warmup, steps, cosine):
    if step < warmup:
        return lr * (step + 1) / warmup
    if not cosine:
        return lr
    span = max(1, steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def train(model, samples, steps, micro_batch, global_batch, lr, min_lr, warmup, cosine, weight_decay, betas,
          eps, grad_clip):
    """Single-process training as the spec defines it; returns per-step mean losses."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, foreach=False)
    accum = global_batch // micro_batch
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, lr, min_lr, warmup, steps, cosine)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for a in range(accum):
            first = step * global_batch + a * micro_batch
            x, y = samples.batch(range(first, first + micro_batch))
            loss = model(x, y)
            (loss / accum).backward()
            total += loss.item()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        losses.append(total / accum)
    return losses
