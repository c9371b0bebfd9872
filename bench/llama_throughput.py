"""Benchmark: Llama training tokens/s of `tessera run` against transformers' LlamaForCausalLM trained
in PyTorch eager mode (its default sdpa attention), same wheel, weights, data, batch and threads,
measured in one run and printed as a ratio. tessera starts from the very model transformers draws
(`model.pretrained` of its save_pretrained directory).

Usage (after tools/setup.sh): bash bench/run_llama.sh [--steps N] [--rounds R]
Prints a table; copy it into bench/RESULTS.md with the date and machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import gpt_reference  # noqa: E402
from throughput_common import interleaved_medians, print_ratios, write_corpus  # noqa: E402

# ~4 layers, hidden 512 (the size); grouped-query attention, SwiGLU of Megatron's default width.
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ, BATCH = 4, 512, 8, 2, 1344, 256, 128, 8


def draw(directory):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)


def tessera_tokens_per_s(tessera, tmp, model_dir, data, steps, warmup, threads):
    out = os.path.join(tmp, f"run_{time.monotonic_ns()}")
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: bench
model: {{pretrained: {model_dir}, seq_len: {SEQ}}}
data: {{path: {data}}}
train: {{steps: {steps}, micro_batch: {BATCH}, global_batch: {BATCH}, lr: 1e-3, schedule: constant, grad_clip: 1.0}}
output_dir: {out}
""")
    subprocess.run([tessera, "run", spec, "--quiet", f"--threads-per-rank={threads}"], check=True)
    with open(os.path.join(out, "steps.jsonl")) as f:
        secs = [json.loads(line)["step_seconds"] for line in f][warmup:]
    return BATCH * SEQ / statistics.median(secs)


def transformers_tokens_per_s(model_dir, data, steps, warmup, threads):
    torch.set_num_threads(threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    samples = gpt_reference.Samples(data, SEQ, False, 0)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    secs = []
    for step in range(steps):
        t0 = time.perf_counter()
        x, y = samples.batch(range(step * BATCH, (step + 1) * BATCH))
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        secs.append(time.perf_counter() - t0)
    return BATCH * SEQ / statistics.median(secs[warmup:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "bazel-bin", "client", "tessera"))
    args = ap.parse_args()
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp()
    model_dir = os.path.join(tmp, "llama")
    draw(model_dir)
    data = write_corpus(tmp, ROOT)
    configs = [
        (f"tessera run, 1 rank x {cores} threads",
         lambda: tessera_tokens_per_s(args.tessera, tmp, model_dir, data, args.steps, args.warmup, cores)),
        (f"transformers LlamaForCausalLM, eager, {cores} threads",
         lambda: transformers_tokens_per_s(model_dir, data, args.steps, args.warmup, cores)),
    ]
    rows = interleaved_medians(configs, args.rounds)
    print(f"Llama {LAYERS}L/{HIDDEN}h/{HEADS}heads/{KV_HEADS}kv/ffn{FFN}/seq{SEQ}, batch {BATCH}, fp32, {cores} cores, "
          f"torch {torch.__version__}, transformers {transformers.__version__}; median step of steps "
          f"{args.warmup + 1}..{args.steps}, median of {args.rounds} interleaved rounds")
    print_ratios(rows, rows[1][0], width=50)


if __name__ == "__main__":
    main()
