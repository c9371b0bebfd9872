"""Benchmark: does the planner's first choice hold up when the candidates are actually run?

For each case (a GPT, a device count and optionally a memory limit per device), on this machine:
  1. calibrate the device model once: achieved FLOP/s of one rank with one thread (the single-rank
     run of the calibration spec: the planner's FLOP count / measured step time) and the bytes per
     second one of two processes sends in a Gloo all-reduce over loopback (torch.distributed, 16 MB);
  2. `tessera plan SPEC --devices N --gflops G --bandwidth-gbs B [--memory-gb M] --output json`;
  3. run every candidate layout the planner listed (`tessera run`, one intra-op thread per rank, so
     N ranks use N cores: run with N ≤ this machine's cores) and take the median step time of the
     steps after the second and the largest peak-RSS growth over the ranks;
  4. compare: the first choice's measured step time against the fastest measured candidate that
     fits the memory limit (goal: ≤ 1.15×), and its predicted memory against its measured peak
     (goal: within 25%).
"memory" is the planner's model states + activations + the 21 MB CPU runtime (client/auto_layout)
against peak RSS during training minus RSS before the model was built (trainer ranks/rank_R.jsonl).

Usage (after tools/setup.sh): bash bench/run_planner_check.sh [--quick]
"""
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESSERA = os.path.join(ROOT, "bazel-bin", "client", "tessera")
RUNTIME_BYTES = 21e6  # Same as client/auto_layout's CPU runtime.

# (name, model, train, devices, memory limit in GB or None)
CASES = [
    ("A: 4L/256h seq 128, batch 16", dict(layers=4, hidden=256, heads=8, vocab=256, seq_len=128),
     dict(micro_batch=8, global_batch=16), 2, None),
    ("A with 0.15 GB per device", dict(layers=4, hidden=256, heads=8, vocab=256, seq_len=128),
     dict(micro_batch=8, global_batch=16), 2, 0.15),
    ("B: 2L/128h seq 2048, batch 2", dict(layers=2, hidden=128, heads=4, vocab=256, seq_len=2048),
     dict(micro_batch=1, global_batch=2), 2, None),
    ("C: 2L/768h seq 32, batch 8", dict(layers=2, hidden=768, heads=12, vocab=512, seq_len=32),
     dict(micro_batch=4, global_batch=8), 2, None),
]


def write_tokens(path, n):
    import numpy as np
    np.random.default_rng(0).integers(0, 256, n, dtype=np.uint16).tofile(path)


def write_spec(tmp, name, data, model, train, steps):
    spec = os.path.join(tmp, name + ".yaml")
    with open(spec, "w") as f:
        f.write("name: plancheck\nmodel: {%s}\ndata: {path: %s}\n" %
                (", ".join(f"{k}: {v}" for k, v in model.items()), data))
        f.write("train: {steps: %d, lr: 1e-3, schedule: constant, %s}\n" %
                (steps, ", ".join(f"{k}: {v}" for k, v in train.items())))
    return spec


def layout_sets(p):
    sets = [f"parallel.dp={p['dp']}", f"parallel.pp={p['pp']}", f"parallel.tp={p['tp']}", f"parallel.sp={p['sp']}",
            f"parallel.tp_mode={p['tp_mode']}"]
    if p["tp_mode"] == "2.5d":
        sets.append(f"parallel.tp_depth={p['tp_depth']}")
    if p["sp"] > 1:
        sets.append(f"parallel.sp_mode={p['sp_mode']}")
    if p["pp"] > 1:
        sets += [f"parallel.pp_schedule={p['pp_schedule']}", f"parallel.pp_chunks={p['pp_chunks']}"]
    return sets


def run(tmp, spec, name, sets):
    """Median step seconds (steps 3..) and the largest RSS growth over ranks, or (None, error)."""
    out = os.path.join(tmp, "".join(c if c.isalnum() else "_" for c in name))
    cmd = [TESSERA, "run", spec, "--quiet", "--threads-per-rank", "1", "--set", f"output_dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip().splitlines()[-1:]
    with open(os.path.join(out, "steps.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    rss = 0
    ranks = os.path.join(out, "ranks")
    for name in os.listdir(ranks):
        with open(os.path.join(ranks, name)) as f:
            for line in f:
                j = json.loads(line)
                rss = max(rss, j["rss_peak_bytes"] - j["rss_base_bytes"])
    times = [s["step_seconds"] for s in steps[2:]] or [s["step_seconds"] for s in steps]
    return (statistics.median(times), rss), None


def plan(spec, devices, gflops, bandwidth_gbs, memory_gb):
    cmd = [TESSERA, "--output", "json", "plan", spec, "--devices", str(devices), "--gflops", f"{gflops:.3f}",
           "--bandwidth-gbs", f"{bandwidth_gbs:.3f}"]
    if memory_gb:
        cmd += ["--memory-gb", str(memory_gb)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def _allreduce_worker(rank, port, queue):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t = torch.ones(4 << 20)  # 16 MB of fp32
    for _ in range(2):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    reps = 8
    for _ in range(reps):
        dist.all_reduce(t)
    seconds = time.perf_counter() - start
    if rank == 0:
        # Ring all-reduce over 2: each process sends 2(n-1)/n·S = S bytes.
        queue.put(reps * t.numel() * 4 / seconds)
    dist.destroy_process_group()


def measure_bandwidth():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = 29000 + os.getpid() % 1000
    procs = [ctx.Process(target=_allreduce_worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    bandwidth = queue.get(timeout=300)
    for p in procs:
        p.join()
    return bandwidth


def calibrate(tmp, data, steps):
    model, train = CASES[0][1], CASES[0][2]
    spec = write_spec(tmp, "calibrate", data, model, train, steps)
    flops = plan(spec, 1, 1.0, 1.0, None)[0]["compute_s"] * 1e9  # FLOPs of one step (at 1 GFLOP/s).
    result, err = run(tmp, spec, "calibrate", [])
    if result is None:
        sys.exit(f"calibration run failed: {err}")
    return flops / result[0], measure_bandwidth()


def main():
    quick = "--quick" in sys.argv
    steps = 4 if quick else 6
    cores = os.cpu_count() or 1
    tmp = tempfile.mkdtemp(prefix="tessera-planner-check-")
    data = os.path.join(tmp, "tokens.bin")
    write_tokens(data, 2_000_000)
    flops, bandwidth = calibrate(tmp, data, steps)
    print(f"Calibrated device: {flops / 1e9:.1f} GFLOP/s (one rank, one thread), "
          f"{bandwidth / 1e9:.2f} GB/s (Gloo all-reduce, 2 processes, loopback); {cores} cores\n")
    summary = []
    for name, model, train, devices, memory_gb in CASES:
        if devices > cores:
            print(f"## {name}: skipped ({devices} devices need {devices} cores, this machine has {cores})\n")
            continue
        spec = write_spec(tmp, "case", data, model, train, steps)
        predictions = plan(spec, devices, flops / 1e9, bandwidth / 1e9, memory_gb)
        print(f"## {name}, {devices} devices" + (f", {memory_gb} GB each" if memory_gb else "") + "\n")
        print("| rank | layout | predicted step_s | measured step_s | predicted mem MB | measured mem MB | fits |")
        print("|---:|---|---:|---:|---:|---:|---|")
        measured = []
        for i, p in enumerate(predictions):
            result, err = run(tmp, spec, f"{name}_{p['layout']}", layout_sets(p))
            if result is None:
                print(f"| {i + 1} | {p['layout']} | {p['step_s']:.3f} | failed: {err} | | | |")
                continue
            step_s, rss = result
            measured.append((p, step_s, rss))
            print(f"| {i + 1} | {p['layout']} | {p['step_s']:.3f} | {step_s:.3f} | {p['memory_bytes'] / 1e6:.0f} | "
                  f"{rss / 1e6:.0f} | {'yes' if p['fits'] else 'no'} |")
        fitting = [m for m in measured if m[0]["fits"]]
        first = next((m for m in measured if m[0] is predictions[0]), None)
        if not fitting or first is None:
            print("\n(no comparison: the first choice or every fitting candidate failed)\n")
            continue
        best = min(fitting, key=lambda m: m[1])
        ratio = first[1] / best[1]
        mem_err = first[0]["memory_bytes"] / first[2] - 1
        summary.append((name, first[0]["layout"], best[0]["layout"], ratio, mem_err))
        print(f"\nfirst choice {first[0]['layout']}: {ratio:.2f}× the fastest measured fitting candidate "
              f"({best[0]['layout']}); predicted memory {mem_err:+.0%} of measured\n")
    print("## Summary\n")
    print("| case | first choice | fastest measured | first / fastest | memory predicted vs measured |")
    print("|---|---|---|---:|---:|")
    for name, first, best, ratio, mem_err in summary:
        print(f"| {name} | {first} | {best} | {ratio:.2f} | {mem_err:+.0%} |")


if __name__ == "__main__":
    main()
