"""Benchmark: Llama training tokens/s of `tessera run` against transformers' LlamaForCausalLM trained
in PyTorch eager mode (its default sdpa attention), same wheel, weights, data, batch and threads,
measured in one run and printed as a ratio. tessera starts from the very model transformers draws
(`model.pretrained` of its save_pretrained directory).

Usage (after tools/setup.sh): bash bench/run_llama.sh [--steps N] [--rounds R]
Prints a table; copy it into bench/RESULTS.md with the date and machine.
"""
import os
import statistics
import sys
import tempfile

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import gpt_reference  # noqa: E402
from throughput_common import (interleaved_medians, parse_bench_args, print_ratios, run_pretrained,  # noqa: E402
                               step_lines, torch_step_seconds, write_corpus)

# ~4 layers, hidden 512 (the size); grouped-query attention, SwiGLU of Megatron's default width.
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ, BATCH = 4, 512, 8, 2, 1344, 256, 128, 8


def draw(directory, vocab=VOCAB):
    """The benchmark's Llama, drawn by transformers (seed 0) and saved to `directory`."""
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)


def tessera_tokens_per_s(tessera, tmp, model_dir, data, steps, warmup, threads):
    out = run_pretrained(tessera, tmp, model_dir, data, SEQ, BATCH, steps, threads)
    return BATCH * SEQ / statistics.median(line["step_seconds"] for line in step_lines(out, warmup))


def transformers_tokens_per_s(model_dir, data, steps, warmup, threads):
    torch.set_num_threads(threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()

    def objective(x, y):
        logits = model(input_ids=x).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    secs = torch_step_seconds(model, objective, gpt_reference.Samples(data, SEQ, False, 0), steps, BATCH)
    return BATCH * SEQ / statistics.median(secs[warmup:])


def main():
    args = parse_bench_args(ROOT, 30)
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
