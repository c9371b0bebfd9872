"""PyTorch 2.11 eager baseline for `gpu_bench gpt`: the same GPT (tests/python/gpt_reference.py), the
same sizes, batch and bf16 parameters, timed the same way (median of 10 after 3 warm-ups, synchronised).
Prints one line in gpu_bench's format.

Without --full: forward+backward only (optimizer excluded on both sides), against `gpu_bench gpt`.
With --full: the whole training step as `gpu_bench train` runs it — bf16 parameters and gradients,
fp32 master weights, global-norm clipping at 1.0, PyTorch's fused AdamW on the masters, masters cast
back to bf16, the loss read on the host — the usual eager recipe (Megatron's mixed-precision optimizer).

With --compile: the model under torch.compile (default mode), the optimizer as above.

Usage: python3 bench/gpu/gpt_eager.py --size 125m|1.3b|tiny [--batch B] [--device cuda|cpu] [--full] [--compile]
"""
import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from mixed_precision_step import MasterWeights  # noqa: E402

SIZES = {"125m": (12, 768, 12, 50304, 1024), "1.3b": (24, 2048, 16, 50304, 1024), "tiny": (2, 64, 4, 256, 64)}


def profile(step, sync, label, top=25):
    """Prints the GPU kernels of one step with the most total time, as gpu_bench's Profile does."""
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    totals = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            ms, n = totals.get(e.name, (0.0, 0))
            totals[e.name] = (ms + e.device_time / 1e3, n + 1)
    print(f"profile {label} gpu_kernel_total_ms {sum(v[0] for v in totals.values()):.2f}")
    for name, (ms, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"profile {label} gpu {ms:.2f} {n} {name[:90]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="125m", choices=SIZES)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--profile", action="store_true", help="one more step under torch.profiler: top GPU kernels")
    a = ap.parse_args()
    layers, hidden, heads, vocab, seq = SIZES[a.size]
    dev = torch.device(a.device)
    model = gpt_reference.GPT(layers, hidden, heads, vocab, seq).to(dev, torch.bfloat16)
    tokens = torch.randint(vocab, (a.batch, seq + 1), device=dev)
    fwd = torch.compile(model) if a.compile else model

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    opt = MasterWeights(model.parameters(), dev)

    def step():
        loss = fwd(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        if a.full:
            opt.step()
            loss.item()
        opt.zero_grad()

    for _ in range(3):
        step()
    sync()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    if a.profile:
        profile(step, sync, f"eager_{a.size}")
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = a.batch * seq
    flops = tokens_per_step * (6.0 * n_params + 12.0 * layers * hidden * seq)
    n = 8192 if dev.type == "cuda" else 1024
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        x @ y
    sync()
    mm = []
    for _ in range(10):
        t0 = time.perf_counter()
        x @ y
        sync()
        mm.append(time.perf_counter() - t0)
    peak = 2.0 * n ** 3 / statistics.median(mm)
    print(f"{'eager_train' if a.full else 'eager'} size {a.size} compile {int(a.compile)} params {n_params} batch {a.batch} seq {seq} step_ms {t * 1e3:.2f} "
          f"tokens_per_s {tokens_per_step / t:.0f} model_TFLOPs {flops / t / 1e12:.1f} "
          f"peak_bf16_TFLOPs {peak / 1e12:.1f} mfu {flops / t / peak:.3f}")


if __name__ == "__main__":
    main()
