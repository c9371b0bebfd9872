"""Benchmark: Mixture-of-Experts training tokens/s of `tessera run` against transformers'
MixtralForCausalLM trained in PyTorch eager mode (its per-expert loop with index ops), same wheel,
weights, data, batch, threads and objective (cross-entropy + 0.02 × balancing loss), measured in one
run and printed as a ratio; and the bytes an expert-parallel run (dp 2 = ep 2) communicates per step
against the formula for them. tessera starts from the very model transformers draws
(`model.pretrained` of its save_pretrained directory).

Usage (after tools/setup.sh): bash bench/run_moe.sh [--steps N] [--rounds R]
Prints a table; copy it into bench/RESULTS.md with the date and machine.
"""
import json
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
from throughput_common import (gemm_floor_seconds, interleaved_medians, parse_bench_args, print_ratios, run_pretrained,  # noqa: E402
                               step_lines, torch_step_seconds, write_corpus)

# The size: ~4 layers, hidden 256, 8 experts, top-2 (expert width 512, GQA 8/2 heads).
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, EXPERTS, TOPK, VOCAB, SEQ, BATCH = 4, 256, 8, 2, 512, 8, 2, 256, 128, 8
COEF = 0.02


def draw(directory):
    config = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        num_local_experts=EXPERTS, num_experts_per_tok=TOPK, output_router_logits=True,
        router_aux_loss_coef=COEF, tie_word_embeddings=False, sliding_window=None)
    torch.manual_seed(0)
    transformers.MixtralForCausalLM(config).save_pretrained(directory, safe_serialization=True)


def tessera_run(tessera, tmp, model_dir, data, steps, warmup, threads, sets=()):
    """(tokens/s of the median step, median over steps of the bytes every rank communicated in it)."""
    out = run_pretrained(tessera, tmp, model_dir, data, SEQ, BATCH, steps, threads, sets)
    lines = step_lines(out, warmup)
    secs = statistics.median(line["step_seconds"] for line in lines)
    per_step = {}
    ranks = os.path.join(out, "ranks")
    for name in os.listdir(ranks):
        with open(os.path.join(ranks, name)) as f:
            for line in f:
                r = json.loads(line)
                per_step[r["step"]] = per_step.get(r["step"], 0) + r["bytes_communicated"]
    return lines[0]["tokens"] / secs, statistics.median(v for k, v in per_step.items() if k > warmup)


def transformers_tokens_per_s(model_dir, data, steps, warmup, threads):
    torch.set_num_threads(threads)
    model = transformers.MixtralForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()

    def objective(x, y):
        out = model(input_ids=x, output_router_logits=True)
        return torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), y.reshape(-1)) + COEF * out.aux_loss

    secs = torch_step_seconds(model, objective, gpt_reference.Samples(data, SEQ, False, 0), steps, BATCH)
    return BATCH * SEQ / statistics.median(secs[warmup:])


def gemm_floor_tokens_per_s(threads, repeats=5):
    """Tokens/s a step could reach if it did nothing but the linear layers' GEMMs (throughput_common.
    gemm_floor_seconds): per block q, k, v, o over all tokens, the router, and every expert's gate, up
    and down over N·k/E rows (perfectly balanced routing); the LM head once."""
    tokens = BATCH * SEQ
    head_dim = HIDDEN // HEADS
    shapes = []  # (rows, in, out) of one linear layer.
    for _ in range(LAYERS):
        shapes += [(tokens, HIDDEN, HIDDEN), (tokens, HIDDEN, KV_HEADS * head_dim), (tokens, HIDDEN, KV_HEADS * head_dim),
                   (tokens, HIDDEN, HIDDEN), (tokens, HIDDEN, EXPERTS)]
        rows = tokens * TOPK // EXPERTS
        shapes += [(rows, HIDDEN, FFN), (rows, HIDDEN, FFN), (rows, FFN, HIDDEN)] * EXPERTS
    shapes.append((tokens, HIDDEN, VOCAB))
    return tokens / gemm_floor_seconds([(shape, True) for shape in shapes], threads, repeats)


def ep2_bytes_formula(dense_params):
    """Bytes both ranks of dp 2 = ep 2 count per step together (Communicator's convention: all-to-all
    (n−1)/n of the data given, all-reduce 2(n−1)/n): per sparse block each rank's per-expert counts
    (E int64) once, and its N·k assignment rows (hidden fp32) out and back in forward and backward —
    a rank also returns the rows it received, which vary with the routing, but over both ranks they
    sum to 2·N·k; the non-expert gradients all-reduced over dp; the experts' over their replicas (one
    rank: nothing); the loss pair and the expert load over dp, the experts' squared norm over ep
    (doubles)."""
    rows = BATCH // 2 * SEQ * TOPK  # N·k of each rank's micro-batch.
    per_rank = LAYERS * (0.5 * EXPERTS * 8 + 4 * 0.5 * rows * HIDDEN * 4)
    per_rank += 2 * 0.5 * dense_params * 4
    per_rank += 2 * 0.5 * (2 * 8 + LAYERS * EXPERTS * 8 + 8)
    return 2 * per_rank


def main():
    args = parse_bench_args(ROOT, 20)
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp()
    model_dir = os.path.join(tmp, "mixtral")
    draw(model_dir)
    data = write_corpus(tmp, ROOT)
    configs = [
        (f"tessera run, 1 rank x {cores} threads",
         lambda: tessera_run(args.tessera, tmp, model_dir, data, args.steps, args.warmup, cores)[0]),
        (f"transformers MixtralForCausalLM, eager, {cores} threads",
         lambda: transformers_tokens_per_s(model_dir, data, args.steps, args.warmup, cores)),
    ]
    rows = interleaved_medians(configs, args.rounds)
    print(f"Mixtral {LAYERS}L/{HIDDEN}h/{HEADS}heads/{KV_HEADS}kv/{EXPERTS} experts of {FFN}/top-{TOPK}/seq{SEQ}, "
          f"batch {BATCH}, fp32, objective CE + {COEF}·aux, {cores} cores, torch {torch.__version__}, "
          f"transformers {transformers.__version__}; median step of steps {args.warmup + 1}..{args.steps}, "
          f"median of {args.rounds} interleaved rounds")
    print_ratios(rows, rows[1][0])
    floor = gemm_floor_tokens_per_s(cores)
    print(f"GEMM floor (the linear layers' GEMMs alone, timed in isolation): {floor:.0f} tokens/s, "
          f"{floor / rows[1][1]:.2f}x transformers — no step of the same fp32 arithmetic can pass it")
    # Expert parallelism's traffic against the formula (one run; bytes do not depend on timing).
    hf = transformers.MixtralForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    dense = sum(p.numel() for n, p in hf.named_parameters() if ".experts." not in n)
    _, measured = tessera_run(args.tessera, tmp, model_dir, data, 4, 1, max(1, cores // 2),
                              ["parallel.dp=2", "parallel.ep=2", f"train.micro_batch={BATCH // 2}"])
    want = ep2_bytes_formula(dense)
    print(f"dp 2 = ep 2: both ranks communicated {measured:.0f} bytes per step; formula {want:.0f} "
          f"({measured / want:.4f}x)")


if __name__ == "__main__":
    main()
