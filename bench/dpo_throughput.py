"""Benchmark: DPO pairs/s of `tessera run` (train.objective dpo) against TRL's own DPOTrainer step on the
same transformers Llama (bench/llama_throughput.py's), pairs (examples/dpo/pairs.jsonl, prepared by
`tessera data prepare --preference` with examples/sft's tokenizer; TRL is fed the same ids through its
DataCollatorForPreference), batch, threads and optimizer (AdamW, clipping), measured in one run with
interleaved rounds and printed as ratios.

TRL's step is DPOTrainer.get_batch_loss_metrics (its concatenated_forward of chosen and rejected in one
batch, its reference pass, dpo_loss) + backward + clipping + AdamW, in two forms: the reference model's
forward in every step (TRL's default), and precompute_ref_log_probs (the reference's log-probabilities
computed once before training, given in the batch). tessera always scores the reference once before
its first step (docs/post-training.md); its steady-state step is the one compared, like TRL's with
precomputed log-probabilities, and the one-time pass is reported apart (a no-grad forward per pair):
steps.jsonl's reference_seconds over the pairs it scored gives its cost a pair, and the epoch row
(pairs/s over one epoch, the pass included: 1 / (1/step rate + pass seconds a pair)) compares with
TRL's default step, which runs the reference in every step.

Usage (after tools/setup.sh): bash bench/run_dpo.sh [--steps N] [--rounds R]
Prints a table; copy it into bench/RESULTS.md with the date and machine.
"""
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import datasets
import torch
import transformers
import trl
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)
from data_reference import read_indexed_dataset  # noqa: E402
from llama_throughput import FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, draw  # noqa: E402
from throughput_common import adamw, interleaved_medians, parse_bench_args, step_lines  # noqa: E402

PAIRS_PER_STEP = 8  # train.global_batch = train.micro_batch (pairs): 16 sequences a step.
SEQ = 64            # Every pair of examples/dpo fits prompt + completion in 65 tokens.


def tessera_pairs_per_s(tessera, tmp, model_dir, data, steps, warmup, threads, pass_per_pair=None):
    """Pairs/s of the median step (steps warmup+1 .. steps); the scoring pass's seconds a pair (of the
    steps · PAIRS_PER_STEP pairs it scored, at most the dataset's) appended to `pass_per_pair`."""
    out = os.path.join(tmp, f"run_{time.monotonic_ns()}")
    spec = os.path.join(tmp, "dpo.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: bench-dpo
model: {{pretrained: {model_dir}, seq_len: {SEQ}}}
data: {{path: {data}}}
train: {{objective: dpo, steps: {steps}, micro_batch: {PAIRS_PER_STEP}, global_batch: {PAIRS_PER_STEP}, lr: 1e-4,
        schedule: constant, grad_clip: 1.0}}
dpo: {{beta: 0.1}}
output_dir: {out}
""")
    subprocess.run([tessera, "run", spec, "--quiet", f"--threads-per-rank={threads}"], check=True)
    secs = statistics.median(line["step_seconds"] for line in step_lines(out, warmup))
    if pass_per_pair is not None:
        with open(os.path.join(out, "steps.jsonl")) as f:
            first = json.loads(f.readline())
        scored = min(steps * PAIRS_PER_STEP, len(read_indexed_dataset(data)[1]) // 3)
        pass_per_pair.append(first["reference_seconds"] / scored)
    return PAIRS_PER_STEP / secs


def trl_pairs_per_s(model_dir, tokenizer, pairs, steps, warmup, threads, precompute):
    """Pairs/s of the median TRL step (see the module's comment)."""
    torch.set_num_threads(threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ref = copy.deepcopy(model).eval()
    args = DPOConfig(output_dir=tempfile.mkdtemp(), beta=0.1, report_to=[], use_cpu=True, padding_value=0,
                     max_length=None, max_prompt_length=None, max_completion_length=None, bf16=False)
    dataset = datasets.Dataset.from_list([{"prompt": "a", "chosen": "b", "rejected": "c"}])
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer)
    collate = DataCollatorForPreference(pad_token_id=0)
    opt = adamw(model, 1e-4)
    model.train()
    secs = []
    for step in range(steps):
        chunk = [pairs[(step * PAIRS_PER_STEP + i) % len(pairs)] for i in range(PAIRS_PER_STEP)]
        batch = collate([{"prompt_input_ids": p, "chosen_input_ids": c, "rejected_input_ids": r} for p, c, r in chunk])
        if precompute:  # Outside the timed step, as TRL's precompute pass runs before training.
            batch["ref_chosen_logps"], batch["ref_rejected_logps"] = trainer.compute_ref_log_probs(batch)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss, _ = trainer.get_batch_loss_metrics(model, batch, train_eval="train")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        secs.append(time.perf_counter() - t0)
    return PAIRS_PER_STEP / statistics.median(secs[warmup:])


def prepared_pairs(tessera, tmp, example):
    """examples/EXAMPLE/pairs.jsonl prepared with examples/sft's tokenizer into tmp/pairs, and the bench's
    Llama drawn into tmp/llama: (the dataset's prefix, the tokenizer, its pairs as (prompt, chosen,
    rejected) ids, the model's directory)."""
    data = os.path.join(tmp, "pairs")
    subprocess.run([tessera, "data", "prepare", "--no-progress", "--tokenizer", os.path.join(ROOT, "examples", "sft"),
                    "--preference", os.path.join(ROOT, "examples", example, "pairs.jsonl"), data], check=True)
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(os.path.join(ROOT, "examples", "sft"))
    _, docs = read_indexed_dataset(data)
    pairs = [tuple(list(map(int, docs[3 * i + k])) for k in range(3)) for i in range(len(docs) // 3)]
    model_dir = os.path.join(tmp, "llama")
    draw(model_dir, len(tokenizer))
    return data, tokenizer, pairs, model_dir


def main():
    args = parse_bench_args(ROOT, 20)
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp()
    data, tokenizer, pairs, model_dir = prepared_pairs(args.tessera, tmp, "dpo")
    tessera_name = f"tessera run, train.objective dpo, {cores} threads"
    trl_name = f"TRL {trl.__version__} DPOTrainer step, reference forward each step, {cores} threads"
    pre_name = f"TRL {trl.__version__} DPOTrainer step, precompute_ref_log_probs, {cores} threads"
    pass_per_pair = []
    rows = interleaved_medians([
        (tessera_name, lambda: tessera_pairs_per_s(args.tessera, tmp, model_dir, data, args.steps, args.warmup, cores,
                                                   pass_per_pair)),
        (trl_name, lambda: trl_pairs_per_s(model_dir, tokenizer, pairs, args.steps, args.warmup, cores, False)),
        (pre_name, lambda: trl_pairs_per_s(model_dir, tokenizer, pairs, args.steps, args.warmup, cores, True)),
    ], args.rounds)
    print(f"DPO on examples/dpo's pairs: Llama {LAYERS}L/{HIDDEN}h/{HEADS}heads/{KV_HEADS}kv/ffn{FFN}/vocab"
          f"{len(tokenizer)}, seq_len {SEQ}, {PAIRS_PER_STEP} pairs a step, fp32, {cores} cores, torch "
          f"{torch.__version__}, transformers {transformers.__version__}; median step of steps {args.warmup + 1}.."
          f"{args.steps}, median of {args.rounds} interleaved rounds")
    # One epoch with the scoring pass: the median step and the median pass cost a pair.
    epoch = 1.0 / (1.0 / dict(rows)[tessera_name] + statistics.median(pass_per_pair))
    rows.insert(1, (f"tessera run, one epoch with the reference's scoring pass "
                    f"({statistics.median(pass_per_pair) * 1e3:.1f} ms a pair)", epoch))
    peer = dict(rows)[trl_name]
    print(f"{'configuration':80s} {'pairs/s':>10s} {'vs TRL':>8s}")
    for name, v in rows:
        print(f"{name:80s} {v:10.2f} {v / peer:8.2f}")


if __name__ == "__main__":
    main()
