"""Benchmark: the step time of two builds of tessera side by side (a refactor must be no slower).

Runs the same 2-rank layouts (dp2, tp2, pp2, sp2 of one GPT; `tessera run` on this machine) with
build A and build B in interleaved rounds (A, B, B, A, ...) so that drifts of a shared machine hit
both; per run the median step time of steps 3..N from rank 0's steps.jsonl, then the median over
rounds. Prints per layout A's and B's medians and B/A.

Usage: tools/python.sh bench/ab_builds.py A_BAZEL_BIN B_BAZEL_BIN [--rounds 5] [--steps 8]
(each a bazel-bin folder holding client/tessera and worker/rank/tessera-rank).
"""
import argparse
import array
import json
import os
import statistics
import subprocess
import tempfile

MODEL = "model: {layers: 4, hidden: 256, heads: 4, vocab: 256, seq_len: 128}\n"
LAYOUTS = [
    ("dp2", ["parallel.dp=2"]),
    ("tp2", ["parallel.tp=2"]),
    ("pp2", ["parallel.pp=2"]),
    ("sp2", ["parallel.sp=2"]),
]


def run(bazel_bin, spec, sets, out, steps):
    env = dict(os.environ, TESSERA_RANK_BINARY=os.path.join(bazel_bin, "worker", "rank", "tessera-rank"))
    cmd = [os.path.join(bazel_bin, "client", "tessera"), "run", spec, "--quiet", "--threads-per-rank=1",
           "--set", f"output_dir={out}", "--set", f"train.steps={steps}"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "steps.jsonl")) as f:
        times = [json.loads(line)["step_seconds"] for line in f]
    return statistics.median(times[2:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="tessera-ab-")
    data = os.path.join(tmp, "data.bin")
    with open(data, "wb") as f:  # uint16 little-endian token ids below the vocabulary (256).
        array.array("H", [(i * 7 + i // 256) % 256 for i in range(200000)]).tofile(f)
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write("name: ab\n" + MODEL + f"data: {{path: {data}}}\n"
                "train: {micro_batch: 4, global_batch: 8, lr: 1e-3}\n")
    print(f"{'layout':8} {'A s/step':>10} {'B s/step':>10} {'B/A':>6}")
    for name, sets in LAYOUTS:
        a, b = [], []
        for r in range(args.rounds):
            order = [("a", args.a), ("b", args.b)] if r % 2 == 0 else [("b", args.b), ("a", args.a)]
            for which, build in order:
                t = run(build, spec, sets, os.path.join(tmp, f"{name}-{which}-{r}"), args.steps)
                (a if which == "a" else b).append(t)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:8} {ma:10.4f} {mb:10.4f} {mb / ma:6.3f}", flush=True)


if __name__ == "__main__":
    main()
