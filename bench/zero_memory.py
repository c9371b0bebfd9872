"""Benchmark: model-state memory per rank under ZeRO stages 0-3 at dp=2 and dp=4 (bf16 parameters,
fp32 master weights and moments), against the ZeRO paper's formulas; and the step time of the demo
GPT with optimizer offload on and off, and in fp32 vs bf16, measured in the same run.

Model-state bytes are counted by the optimizer (parallel/zero): parameters, gradients, master
weights and moments held by rank 0, at their peak within a step (including what is in flight:
gradients being reduced, units gathered by stage 3). One micro-batch per step in the first table;
the second has four (data parallel, and dp x pp where a pipeline always accumulates) with
parallel.zero_grad_reduce micro_batch (reduce-scatter every backward pass) vs step (once a step).

Usage (after tools/setup.sh): bash bench/run_zero.sh [--only=memory|accum|time]
Prints tables; copy them into bench/RESULTS.md with the date and machine.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESSERA = os.path.join(ROOT, "bazel-bin", "client", "tessera")
MEM_MODEL = dict(layers=8, hidden=256, heads=4, vocab=256, seq_len=128)
# Deeper and narrower: a block is 4% of the parameters, as in real models (in MEM_MODEL it is 12%, and
# the few blocks whose full gradients are in flight would hide what the reduction schedule changes).
ACCUM_MODEL = dict(layers=24, hidden=128, heads=4, vocab=256, seq_len=128)
DEMO_MODEL = dict(layers=4, hidden=256, heads=4, vocab=256, seq_len=128)


def params(m):
    h = m["hidden"]
    return m["vocab"] * h + m["seq_len"] * h + m["layers"] * (12 * h * h + 13 * h) + 2 * h


def write_tokens(path, n):
    import numpy as np
    rng = np.random.default_rng(0)
    rng.integers(0, 256, n, dtype=np.uint16).tofile(path)


def run(tmp, data, name, model, sets, steps):
    out = os.path.join(tmp, name)
    spec = os.path.join(tmp, name + ".yaml")
    with open(spec, "w") as f:
        f.write("name: bench\nmodel: {%s}\ndata: {path: %s}\n" %
                (", ".join(f"{k}: {v}" for k, v in model.items()), data))
        f.write(f"train: {{steps: {steps}, lr: 1e-3, schedule: constant}}\n")
    cmd = [TESSERA, "run", spec, "--quiet", "--set", f"output_dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True)
    with open(os.path.join(out, "steps.jsonl")) as f:
        return [json.loads(line) for line in f]


def accumulation(tmp, data):
    m = ACCUM_MODEL
    psi = params(m)
    print(f"\n## Model-state bytes per rank with 4 micro-batches per step, GPT {m['layers']}L/"
          f"{m['hidden']}h, Psi = {psi:,}, bf16, rank 0 (pipeline: its first stage)\n")
    print("| layout | stage | zero_grad_reduce | measured peak (MB) | bytes / Ψ | bytes sent per step (MB) |")
    print("|---|---:|---|---:|---:|---:|")
    for layout, sets in [("dp2", ["parallel.dp=2", "train.global_batch=8"]),
                         ("dp4", ["parallel.dp=4", "train.global_batch=16"]),
                         ("dp2×pp2", ["parallel.dp=2", "parallel.pp=2", "train.global_batch=8"])]:
        for stage in range(4):
            for mode in (["micro_batch", "step"] if stage >= 2 else ["-"]):
                extra = [f"parallel.zero_grad_reduce={mode}"] if stage >= 2 else []
                steps = run(tmp, data, f"accum_{layout}_s{stage}_{mode}", m,
                            sets + [f"parallel.zero_stage={stage}", "train.precision=bf16",
                                    "train.micro_batch=1"] + extra, 2)
                peak = max(s["model_state_bytes"] for s in steps)
                sent = steps[-1].get("bytes_communicated", 0)
                print(f"| {layout} | {stage} | {mode} | {peak / 1e6:.2f} | {peak / psi:.2f} | {sent / 1e6:.2f} |")
                sys.stdout.flush()


def main():
    only = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), None)
    tmp = tempfile.mkdtemp(prefix="tessera-zero-bench-")
    data = os.path.join(tmp, "tokens.bin")
    write_tokens(data, 200000)
    if only in (None, "memory"):
        memory(tmp, data)
    if only in (None, "accum"):
        accumulation(tmp, data)
    if only in (None, "time"):
        step_time(tmp, data)


def memory(tmp, data):
    psi = params(MEM_MODEL)
    print(f"## Model-state bytes per rank, GPT {MEM_MODEL['layers']}L/{MEM_MODEL['hidden']}h, "
          f"Psi = {psi:,} parameters, bf16, 1 micro-batch per step\n")
    print("| dp | stage | measured peak (MB) | formula | formula (MB) | measured / formula |")
    print("|---:|---:|---:|---|---:|---:|")
    formulas = [("16Ψ", lambda n: 16), ("4Ψ+12Ψ/N", lambda n: 4 + 12 / n),
                ("2Ψ+14Ψ/N", lambda n: 2 + 14 / n), ("16Ψ/N", lambda n: 16 / n)]
    for dp in (2, 4):
        for stage in range(4):
            steps = run(tmp, data, f"mem_dp{dp}_s{stage}", MEM_MODEL,
                        [f"parallel.dp={dp}", f"parallel.zero_stage={stage}", "train.precision=bf16",
                         "train.micro_batch=1", f"train.global_batch={dp}"], 2)
            peak = max(s["model_state_bytes"] for s in steps)
            label, f = formulas[stage]
            want = f(dp) * psi
            print(f"| {dp} | {stage} | {peak / 1e6:.2f} | {label} | {want / 1e6:.2f} | {peak / want:.3f} |")
            sys.stdout.flush()


def step_time(tmp, data):
    print(f"\n## Step time, demo GPT ({params(DEMO_MODEL):,} parameters), dp=1, batch 8, median of steps 3-8\n")
    print("| precision | zero_stage | offload | step (s) | vs fp32 no offload |")
    print("|---|---:|---|---:|---:|")
    base = None
    for precision, stage, offload in [("fp32", 0, "none"), ("fp32", 0, "cpu"), ("fp32", 1, "none"),
                                      ("bf16", 0, "none"), ("bf16", 0, "cpu")]:
        steps = run(tmp, data, f"time_{precision}_{stage}_{offload}", DEMO_MODEL,
                    [f"train.precision={precision}", f"parallel.zero_stage={stage}", f"optimizer.offload={offload}",
                     "train.micro_batch=8", "train.global_batch=8"], 8)
        t = statistics.median(s["step_seconds"] for s in steps[2:])
        base = base or t
        print(f"| {precision} | {stage} | {offload} | {t:.3f} | {t / base:.2f}x |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
