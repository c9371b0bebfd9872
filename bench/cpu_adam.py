"""CPU AdamW throughput: tessera's kernel (each SIMD level) vs torch's AdamW in C++ ops and PyTorch's
torch.optim.AdamW (foreach and fused) in Python, and vs the memory-bandwidth bound measured in the
same run. Usage: bash bench/run_cpu_adam.sh [N] (default 100M parameters)."""
import json
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_adamw(n, reps, **kw):
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n) * 0.01
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, **kw)
    best = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000_000
    reps = 7
    out = subprocess.run([os.path.join(ROOT, "bazel-bin", "bench", "cpu_adam_bench"), str(n), str(reps)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    torch.set_num_threads(r["threads"])
    rows = [(k[len("tessera_"):-len("_params_per_s")], v) for k, v in r.items() if k.startswith("tessera_")]
    best = max(v for _, v in rows)
    others = [("torch AdamW in C++ ops", r["torch_cpp_ops_params_per_s"]),
              ("PyTorch AdamW foreach", python_adamw(n, reps, foreach=True)),
              ("PyTorch AdamW fused", python_adamw(n, reps, fused=True))]
    bound = r["bound_params_per_s"]
    stream = r["stream_params_per_s"]
    print(f"CPU AdamW, {n / 1e6:.0f}M fp32 parameters, {r['threads']} threads, torch {torch.__version__}")
    print(f"copy bound: large copy {r['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s -> {bound / 1e6:.0f}M params/s at "
          f"28 B/param")
    print(f"stream bound: AdamW's loads and stores without its arithmetic "
          f"{r['stream_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s -> {stream / 1e6:.0f}M params/s")
    print(f"{'implementation':28s} {'M params/s':>11s} {'of copy bound':>14s} {'of stream bound':>16s} "
          f"{'tessera best ÷ this':>20s}")
    for name, v in [(f"tessera {k}", v) for k, v in rows] + others:
        print(f"{name:28s} {v / 1e6:11.1f} {v / bound:14.0%} {v / stream:16.0%} {best / v:20.2f}")
    fused, first = r["lowp_in_pass_params_per_s"], r["lowp_converted_first_params_per_s"]
    print(f"bf16 gradients x factor ({r['simd']}): read in the update's pass {fused / 1e6:.1f}M params/s, "
          f"converted and scaled first {first / 1e6:.1f}M params/s: {fused / first:.2f}x")


if __name__ == "__main__":
    main()
