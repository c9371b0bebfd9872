"""Benchmark: reward-model pairs/s of `tessera run` (train.objective reward) against TRL's own RewardTrainer
step on the same transformers Llama (bench/llama_throughput.py's, its LM head replaced by a score head on
both sides), pairs (examples/reward/pairs.jsonl, prepared by `tessera data prepare --preference` with
examples/sft's tokenizer; TRL is fed the same ids, prompt + completion, through its
DataCollatorForPreference), batch, threads and optimizer (AdamW, clipping), measured in one run with
interleaved rounds and printed as ratios. TRL's step is RewardTrainer.compute_loss (its forward of the
chosen and rejected sequences in one batch, the scores at their last tokens, the loss with margins) +
backward + clipping + AdamW.

Usage (after tools/setup.sh): bash bench/run_reward.sh [--steps N] [--rounds R]
Prints a table; copy it into bench/RESULTS.md with the date and machine.
"""
import os
import statistics
import subprocess
import tempfile
import time

import datasets
import torch
import transformers
import trl
from trl import RewardConfig, RewardTrainer
from trl.trainer.reward_trainer import DataCollatorForPreference

from dpo_throughput import PAIRS_PER_STEP, ROOT, SEQ, prepared_pairs
from llama_throughput import FFN, HEADS, HIDDEN, KV_HEADS, LAYERS
from throughput_common import adamw, interleaved_medians, parse_bench_args, step_lines


def tessera_pairs_per_s(tessera, tmp, model_dir, data, steps, warmup, threads):
    """Pairs/s of the median step (steps warmup+1 .. steps)."""
    out = os.path.join(tmp, f"run_{time.monotonic_ns()}")
    spec = os.path.join(tmp, "reward.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: bench-reward
model: {{pretrained: {model_dir}, seq_len: {SEQ}}}
data: {{path: {data}}}
train: {{objective: reward, steps: {steps}, micro_batch: {PAIRS_PER_STEP}, global_batch: {PAIRS_PER_STEP}, lr: 1e-4,
        schedule: constant, grad_clip: 1.0}}
output_dir: {out}
""")
    subprocess.run([tessera, "run", spec, "--quiet", f"--threads-per-rank={threads}"], check=True)
    secs = statistics.median(line["step_seconds"] for line in step_lines(out, warmup))
    return PAIRS_PER_STEP / secs


def trl_pairs_per_s(model_dir, tokenizer, pairs, margins, steps, warmup, threads):
    """Pairs/s of the median TRL step (see the module's comment)."""
    torch.set_num_threads(threads)
    model = transformers.LlamaForSequenceClassification.from_pretrained(model_dir, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.eos_token_id
    args = RewardConfig(output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=True, bf16=False,
                        gradient_checkpointing=False, max_length=None)
    dataset = datasets.Dataset.from_list([{"chosen_input_ids": [1, 2], "rejected_input_ids": [1, 3]}])
    trainer = RewardTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    collate = DataCollatorForPreference(pad_token_id=tokenizer.eos_token_id)
    opt = adamw(model, 1e-4)
    model.train()
    secs = []
    for step in range(steps):
        index = [(step * PAIRS_PER_STEP + i) % len(pairs) for i in range(PAIRS_PER_STEP)]
        batch = collate([{"chosen_input_ids": pairs[i][0] + pairs[i][1], "rejected_input_ids": pairs[i][0] + pairs[i][2],
                          "margin": margins[i]} for i in index])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        secs.append(time.perf_counter() - t0)
    return PAIRS_PER_STEP / statistics.median(secs[warmup:])


def main():
    args = parse_bench_args(ROOT, 20)
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp()
    data, tokenizer, pairs, model_dir = prepared_pairs(args.tessera, tmp, "reward")
    with open(data + ".pref.margin", "rb") as f:
        margins = list(memoryview(f.read()).cast("d"))
    tessera_name = f"tessera run, train.objective reward, {cores} threads"
    trl_name = f"TRL {trl.__version__} RewardTrainer step, {cores} threads"
    rows = interleaved_medians([
        (tessera_name, lambda: tessera_pairs_per_s(args.tessera, tmp, model_dir, data, args.steps, args.warmup, cores)),
        (trl_name, lambda: trl_pairs_per_s(model_dir, tokenizer, pairs, margins, args.steps, args.warmup, cores)),
    ], args.rounds)
    print(f"Reward model on examples/reward's pairs: Llama {LAYERS}L/{HIDDEN}h/{HEADS}heads/{KV_HEADS}kv/ffn{FFN}/"
          f"vocab{len(tokenizer)} with a score head, seq_len {SEQ}, {PAIRS_PER_STEP} pairs a step, fp32, {cores} cores, "
          f"torch {torch.__version__}, transformers {transformers.__version__}; median step of steps "
          f"{args.warmup + 1}..{args.steps}, median of {args.rounds} interleaved rounds")
    peer = dict(rows)[trl_name]
    print(f"{'configuration':60s} {'pairs/s':>10s} {'vs TRL':>8s}")
    for name, v in rows:
        print(f"{name:60s} {v:10.2f} {v / peer:8.2f}")


if __name__ == "__main__":
    main()
