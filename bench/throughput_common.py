"""What the throughput benchmarks against PyTorch share (bench/*_throughput.py): the byte-level corpus
they train on, a `tessera run` of a transformers directory, the PyTorch training step they time, the
interleaved rounds with medians, and the ratio table."""
import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np
import torch


def parse_bench_args(root, default_steps):
    """The throughput benchmarks' command line: --steps, --warmup, --rounds, --tessera."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=default_steps)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tessera", default=os.path.join(root, "bazel-bin", "client", "tessera"))
    return ap.parse_args()


def write_corpus(directory, root):
    """DIR/tokens.bin: byte-level tokens (uint16) of the GPL text (or the README); returns its path."""
    data = os.path.join(directory, "tokens.bin")
    gpl = "/usr/share/common-licenses/GPL-3"
    text = open(gpl, "rb").read() if os.path.exists(gpl) else open(os.path.join(root, "README.md"), "rb").read()
    np.frombuffer(text, dtype=np.uint8).astype("<u2").tofile(data)
    return data


def interleaved_medians(configs, rounds):
    """[(name, median)] of `rounds` interleaved rounds of every (name, measure) in `configs`: the
    machine is shared and noisy, and interleaving keeps a slow period from landing on one
    configuration only."""
    runs = {name: [] for name, _ in configs}
    for _ in range(rounds):
        for name, measure in configs:
            runs[name].append(measure())
    return [(name, statistics.median(v)) for name, v in runs.items()]


def print_ratios(rows, peer_name, width=55):
    """The tokens/s table, each row as a ratio to the row named `peer_name`."""
    peer = dict(rows)[peer_name]
    print(f"{'configuration':{width}s} {'tokens/s':>10s} {'vs transformers':>16s}")
    for name, v in rows:
        print(f"{name:{width}s} {v:10.0f} {v / peer:16.2f}")


def run_pretrained(tessera, directory, model_dir, data, seq, batch, steps, threads, sets=()):
    """`tessera run` of `model_dir` (model.pretrained) for `steps` steps of `batch` samples (constant
    LR, clipping); returns the output directory (steps.jsonl, ranks/rank_R.jsonl)."""
    out = os.path.join(directory, f"run_{time.monotonic_ns()}")
    spec = os.path.join(directory, "spec.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: bench
model: {{pretrained: {model_dir}, seq_len: {seq}}}
data: {{path: {data}}}
train: {{steps: {steps}, micro_batch: {batch}, global_batch: {batch}, lr: 1e-3, schedule: constant, grad_clip: 1.0}}
output_dir: {out}
""")
    cmd = [tessera, "run", spec, "--quiet", f"--threads-per-rank={threads}"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True)
    return out


def step_lines(out, warmup):
    """Rank 0's step lines of a run after the first `warmup` steps."""
    with open(os.path.join(out, "steps.jsonl")) as f:
        return [json.loads(line) for line in f][warmup:]


def adamw(model, lr):
    """AdamW as tessera's spec defines it: weight decay 0.1 on tensors with ≥ 2 dims, betas (0.9, 0.95)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def torch_step_seconds(model, objective, samples, steps, batch):
    """Seconds of each of `steps` training steps of `model` in PyTorch as tessera's spec defines one
    (AdamW with weight decay on ≥2-D tensors, clipping at 1.0); `objective(x, y)` is the loss."""
    opt = adamw(model, 1e-3)
    secs = []
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = samples.batch(range(step * batch, (step + 1) * batch))
        opt.zero_grad(set_to_none=True)
        loss = objective(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        secs.append(time.perf_counter() - t0)
    return secs


def gemm_floor_seconds(linears, threads, repeats=5):
    """Seconds a training step takes if it does nothing but its linear layers' GEMMs, each timed alone
    with torch.mm on `threads` threads: `linears` lists ((rows, in, out), weight_grad) — forward x·Wᵀ,
    backward g·W, and gᵀ·x when the weight trains (weight_grad). Attention's own products, element-wise
    work and the optimizer are left out, so no step of the same fp32 arithmetic can be faster: the
    median over `repeats` timings."""
    torch.set_num_threads(threads)
    operands = {}
    for (m, k, n), _ in linears:
        if (m, k, n) not in operands:
            operands[(m, k, n)] = (torch.randn(m, k), torch.randn(n, k), torch.randn(m, n))

    def one_step():
        for key, weight_grad in linears:
            x, w, g = operands[key]
            torch.mm(x, w.t())
            torch.mm(g, w)
            if weight_grad:
                torch.mm(g.t(), x)

    one_step()
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        one_step()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)
