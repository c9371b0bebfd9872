"""Benchmark: pipeline schedules on one GPT — 1F1B, interleaved 1F1B (2 chunks per stage), zero-bubble
ZB-H1 (zb1p) and ZB-V (zbv, 2 chunks per stage in a V) — at pp 2 and 4 with 4 and 8 micro-batches
per step, in interleaved rounds.

Per (pp, m, schedule), from each run's steps 3..N (medians over steps, then over rounds):
  step_s     rank 0's step time (steps.jsonl step_seconds)
  bubble     the measured bubble: steps.jsonl pipeline_bubble — 1 − Σ over stages of (its pipeline
             time − its waits for activations or gradients) / (pp · the longest stage's pipeline time)
  model      the schedule simulator's bubble (layout/schedule.h) with F = B = W (zbv: no closed
             form, blank; layout/schedule_test.cc simulates it)
  vs 1F1B    1F1B's step time / this schedule's (throughput ratio)
Goal (issue 39): zb1p's bubble at most half of 1F1B's, and its throughput at least 1.1x 1F1B's at pp 2, m 4.
NOTE: ranks share this machine's cores: with more ranks than cores (pp 4 on 2 cores) a rank waiting
for its input leaves its core to another, so measured bubbles and ratios at pp 4 are not a
pipeline's; pp 2 on 2 cores is one core per stage.

Usage (after tools/setup.sh): bash bench/run_pipeline.sh [--rounds=N] [--quick] [--hidden=H]
  --quick     pp 2, m 4 only
  --hidden=H  the model's hidden size (default 256); larger makes the step GEMM-bound (W closer to F)
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_modes import run, write_spec, write_tokens  # noqa: E402

MODEL = dict(layers=8, hidden=256, heads=8, vocab=256, seq_len=128)
SCHEDULES = [
    ("1f1b", []),
    ("interleaved", ["parallel.pp_schedule=interleaved", "parallel.pp_chunks=2"]),
    ("zb1p", ["parallel.pp_schedule=zb1p"]),
    ("zbv", ["parallel.pp_schedule=zbv"]),
]


def simulated_bubble(pp, m, schedule):
    # The schedule simulator's bubble with F = B = W per chunk (what `tessera plan` uses), computed here
    # from the closed forms the simulator reproduces (layout/schedule_test.cc): 1F1B (pp−1)·3 of
    # (m+pp−1)·3; interleaved ×2: (pp−1)·3/2 of m·3 + (pp−1)·3/2; ZB-H1 with m ≥ 2·pp: (pp−1) of
    # (pp−1) + 3m (fewer micro-batches: not a closed form, left blank).
    if schedule == "1f1b":
        return (pp - 1) / (m + pp - 1)
    if schedule == "interleaved":
        return (pp - 1) / (2 * m + pp - 1)
    if schedule == "zb1p" and m >= 2 * pp:
        return (pp - 1) / (pp - 1 + 3 * m)
    return None


def main():
    rounds = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--rounds=")), 3)
    hidden = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--hidden=")), MODEL["hidden"])
    MODEL["hidden"] = hidden
    quick = "--quick" in sys.argv
    grid = [(2, 4)] if quick else [(2, 4), (2, 8), (4, 4), (4, 8)]
    tmp = tempfile.mkdtemp(prefix="tessera-pipeline-bench-")
    data = os.path.join(tmp, "tokens.bin")
    write_tokens(data, 2_000_000)
    results = {}  # (pp, m, schedule) -> list of (step_s, bubble) per round
    for rnd in range(rounds):
        for pp, m in grid:
            spec = write_spec(tmp, f"pipe{pp}_{m}", data, MODEL, dict(micro_batch=4, global_batch=4 * m), 6)
            for name, sets in SCHEDULES:
                if name == "interleaved" and m % pp:
                    continue
                steps, err = run(tmp, spec, f"r{rnd}_pp{pp}_m{m}_{name}", [f"parallel.pp={pp}"] + sets)
                if steps is None:
                    print(f"pp {pp} m {m} {name}: failed\n{err[-2000:]}", file=sys.stderr)
                    continue
                tail = steps[2:]
                step_s = statistics.median(s["step_seconds"] for s in tail)
                bubble = statistics.median(s["pipeline_bubble"] for s in tail)
                results.setdefault((pp, m, name), []).append((step_s, bubble))
    print(f"## Pipeline schedules, GPT {MODEL['layers']}L/{MODEL['hidden']}h, seq {MODEL['seq_len']}, "
          f"micro_batch 4, {rounds} interleaved rounds (medians)\n")
    print("| pp | m | schedule | step s | bubble (measured) | bubble (model) | throughput vs 1F1B |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for pp, m in grid:
        base = results.get((pp, m, "1f1b"))
        base_s = statistics.median(r[0] for r in base) if base else None
        for name, _ in SCHEDULES:
            got = results.get((pp, m, name))
            if not got:
                continue
            step_s = statistics.median(r[0] for r in got)
            bubble = statistics.median(r[1] for r in got)
            model = simulated_bubble(pp, m, name)
            ratio = f"{base_s / step_s:.2f}x" if base_s else ""
            print(f"| {pp} | {m} | {name} | {step_s:.3f} | {bubble:.3f} | "
                  f"{'' if model is None else f'{model:.3f}'} | {ratio} |")
    print()


if __name__ == "__main__":
    main()
