"""Benchmark: every parallel mode of one GPT at 4 and 8 ranks on this machine, against the planner's
predictions (plan/planner), plus the pipeline bubble and the longest sequence per activation
budget with sequence parallelism.

Per layout (6 steps; medians of steps 3-6, rank 0's steps.jsonl):
  step_s        measured step time (NOTE: ranks share this machine's cores: with more ranks than
                cores the time measures total work, not parallel speed-up)
  comm MB       bytes the busiest rank sent per step (Communicator::bytes_communicated: ring-algorithm volume of
                the collectives actually issued) next to the planner's per-device prediction
  state MB      model-state bytes counted by the trainer (parameters, gradients, AdamW moments)
  rss MB        the largest (peak resident memory minus resident memory before the model was built)
                over the ranks
  live MB       the largest peak of host tensor bytes alive in a step over the ranks (live_peak_bytes:
                a counting allocator, parallel/device/live_bytes.h)
  act MB        of it, what is not model state (activations, buffers, temporaries): live − state
  pred mem MB   the planner's model states + activations per device
Pipeline bubble: the first stage's time waiting for activations/gradients over the step, against
(p-1)/(m+p-1) (1F1B) at pp=2 (2 ranks: no oversubscription on 2 cores) and pp=4. (The first stage
idles only while waiting for gradients; later stages also idle after their last backward, outside
any receive, so their waiting time undercounts.)
Longest sequence: the largest seq_len (doubling) whose activation memory (rss delta minus model
states) stays under a per-rank budget, with sp = 1, 2 and 4 (ring).

Usage (after tools/setup.sh): bash bench/run_parallel.sh [--quick] [--only=modes,bubble,seq]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESSERA = os.path.join(ROOT, "bazel-bin", "client", "tessera")
MODEL = dict(layers=8, hidden=256, heads=8, vocab=256, seq_len=128)
TRAIN = dict(micro_batch=8, global_batch=32)

LAYOUTS = {
    4: [
        ("dp4", ["parallel.dp=4"]),
        ("tp4(1d)", ["parallel.tp=4"]),
        ("tp4(2d)", ["parallel.tp=4", "parallel.tp_mode=2d"]),
        ("pp4", ["parallel.pp=4"]),
        ("pp4(interleaved×2)", ["parallel.pp=4", "parallel.pp_schedule=interleaved", "parallel.pp_chunks=2"]),
        ("sp4(ring)", ["parallel.sp=4"]),
        ("sp4(all_to_all)", ["parallel.sp=4", "parallel.sp_mode=all_to_all"]),
        ("dp2 tp2(1d)", ["parallel.dp=2", "parallel.tp=2"]),
        ("pp2 tp2(1d)", ["parallel.pp=2", "parallel.tp=2"]),
    ],
    8: [
        ("dp8", ["parallel.dp=8", "train.micro_batch=4"]),
        ("tp8(1d)", ["parallel.tp=8"]),
        ("tp8(2.5d,d=2)", ["parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2"]),
        ("tp8(3d)", ["parallel.tp=8", "parallel.tp_mode=3d"]),
        ("dp2 tp4(2d)", ["parallel.dp=2", "parallel.tp=4", "parallel.tp_mode=2d"]),
        ("dp2 pp2 tp2(1d)", ["parallel.dp=2", "parallel.pp=2", "parallel.tp=2"]),
        ("dp2 pp2 sp2(ring)", ["parallel.dp=2", "parallel.pp=2", "parallel.sp=2"]),
        ("pp4 tp2(1d)", ["parallel.pp=4", "parallel.tp=2"]),
    ],
}


def write_tokens(path, n):
    import numpy as np
    rng = np.random.default_rng(0)
    rng.integers(0, 256, n, dtype=np.uint16).tofile(path)


def write_spec(tmp, name, data, model, train, steps):
    spec = os.path.join(tmp, name + ".yaml")
    with open(spec, "w") as f:
        f.write("name: bench\nmodel: {%s}\ndata: {path: %s}\n" % (", ".join(f"{k}: {v}" for k, v in model.items()), data))
        f.write("train: {steps: %d, lr: 1e-3, schedule: constant, %s}\n" %
                (steps, ", ".join(f"{k}: {v}" for k, v in train.items())))
    return spec


def run(tmp, spec, name, sets):
    out = os.path.join(tmp, name.replace(" ", "_").replace("(", "_").replace(")", "").replace(",", "_"))
    cmd = [TESSERA, "run", spec, "--quiet", "--set", f"output_dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stdout + r.stderr
    with open(os.path.join(out, "steps.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    # Per-rank measurements: the busiest rank's communication and memory.
    ranks_dir = os.path.join(out, "ranks")
    per_rank = []
    for name in sorted(os.listdir(ranks_dir)):
        with open(os.path.join(ranks_dir, name)) as f:
            per_rank.append([json.loads(line) for line in f])
    for i, s in enumerate(steps):
        s["max_bytes_communicated"] = max(r[i]["bytes_communicated"] for r in per_rank)
        s["max_rss_delta"] = max(r[i]["rss_peak_bytes"] - r[i]["rss_base_bytes"] for r in per_rank)
        s["max_model_state_bytes"] = max(r[i]["model_state_bytes"] for r in per_rank)
        # Host tensor bytes alive at the step's peak, and what of it is not model state (activations,
        # communication buffers, temporaries), on the rank where that is largest.
        s["max_live_bytes"] = max(r[i].get("live_peak_bytes", 0) for r in per_rank)
        s["max_activation_bytes"] = max(r[i].get("live_peak_bytes", 0) - r[i]["model_state_bytes"] for r in per_rank)
        s["mean_pipeline_wait_s"] = statistics.mean(r[i].get("pipeline_wait_s", 0) for r in per_rank)
    return steps, ""


def plan(spec, devices, sets):
    cmd = [TESSERA, "--output", "json", "plan", spec, "--devices", str(devices)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return {p["layout"]: p for p in json.loads(r.stdout)}


def median(steps, key, skip=2):
    vals = [s[key] for s in steps[skip:]] or [s[key] for s in steps]
    return statistics.median(vals)


def modes(tmp, data, quick):
    print(f"## Parallel modes, GPT {MODEL['layers']}L/{MODEL['hidden']}h/{MODEL['heads']} heads, seq {MODEL['seq_len']}, "
          f"micro_batch {TRAIN['micro_batch']}, global_batch {TRAIN['global_batch']} (fp32)\n")
    spec = write_spec(tmp, "modes", data, MODEL, TRAIN, 4 if quick else 6)
    for n, layouts in LAYOUTS.items():
        print(f"### {n} ranks\n")
        print("| layout | step_s | comm MB measured | comm MB predicted | measured/predicted | state MB | "
              "live MB | act MB | rss MB | pred mem MB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, sets in layouts:
            extra = [s for s in sets if s.startswith("train.")]
            predictions = plan(spec, n, extra)
            steps, err = run(tmp, spec, f"{n}_{name}", sets)
            if steps is None:
                print(f"| {name} | failed: {err.strip().splitlines()[-1] if err.strip() else '?'} |")
                continue
            p = predictions.get(name)
            comm = median(steps, "max_bytes_communicated") / 1e6
            pred = p["comm_bytes"] / 1e6 if p else float("nan")
            rss = max(s["max_rss_delta"] for s in steps) / 1e6
            print(f"| {name} | {median(steps, 'step_seconds'):.3f} | {comm:.2f} | {pred:.2f} | "
                  f"{comm / pred if p and pred else float('nan'):.2f} | {steps[-1]['max_model_state_bytes'] / 1e6:.1f} | "
                  f"{max(s['max_live_bytes'] for s in steps) / 1e6:.1f} | "
                  f"{max(s['max_activation_bytes'] for s in steps) / 1e6:.1f} | "
                  f"{rss:.1f} | {p['memory_bytes'] / 1e6 if p else float('nan'):.1f} |")
        print()


def bubble(tmp, data, quick):
    print("## Pipeline bubble (1F1B): the first stage's waiting time / step time vs (p-1)/(m+p-1)\n")
    print("| pp | micro-batches m | measured | formula |")
    print("|---:|---:|---:|---:|")
    for pp, m in [(2, 4), (2, 8), (4, 8)] if not quick else [(2, 4)]:
        train = dict(micro_batch=4, global_batch=4 * m)
        spec = write_spec(tmp, f"bubble{pp}_{m}", data, MODEL, train, 6)
        steps, err = run(tmp, spec, f"bubble_pp{pp}_m{m}", [f"parallel.pp={pp}"])
        if steps is None:
            print(f"| {pp} | {m} | failed | |")
            continue
        measured = statistics.median(s["pipeline_wait_s"] / s["step_seconds"] for s in steps[2:])
        print(f"| {pp} | {m} | {measured:.3f} | {(pp - 1) / (m + pp - 1):.3f} |")
    print()


def longest_sequence(tmp, data, quick, budget_mb=192):
    model = dict(layers=2, hidden=128, heads=4, vocab=256)
    print(f"## Longest sequence under {budget_mb} MB of activations per rank (GPT 2L/128h, micro_batch 1, "
          "ring attention)\n")
    print("| sp | longest seq_len that fits | its activation MB per rank |")
    print("|---:|---:|---:|")
    for sp in [1, 2, 4]:
        best, best_mb, seq = 0, 0.0, 512
        while seq <= (4096 if quick else 16384):
            spec = write_spec(tmp, f"seq{sp}_{seq}", data, dict(model, seq_len=seq), dict(micro_batch=1, global_batch=1), 2)
            steps, err = run(tmp, spec, f"seq_sp{sp}_{seq}", [f"parallel.sp={sp}"] if sp > 1 else [])
            if steps is None:
                break
            act = (max(s["max_rss_delta"] for s in steps) - steps[-1]["max_model_state_bytes"]) / 1e6
            if act > budget_mb:
                break
            best, best_mb, seq = seq, act, seq * 2
        print(f"| {sp} | {best} | {best_mb:.0f} |")
    print()


def main():
    quick = "--quick" in sys.argv
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), ["modes", "bubble", "seq"])
    tmp = tempfile.mkdtemp(prefix="tessera-parallel-bench-")
    data = os.path.join(tmp, "tokens.bin")
    write_tokens(data, 2_000_000)
    if "modes" in only:
        modes(tmp, data, quick)
    if "bubble" in only:
        bubble(tmp, data, quick)
    if "seq" in only:
        longest_sequence(tmp, data, quick)


if __name__ == "__main__":
    main()
