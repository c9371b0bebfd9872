"""Benchmark: chat fine-tuning (SFT) tokens/s of `tessera run` against transformers' LlamaForCausalLM
trained in PyTorch eager mode — full fine-tuning, and LoRA against peft's adapters on the same
linears — with the same wheel, weights, conversations, batch, threads and objective (the assistant
tokens' cross-entropy over the batch's trained targets, AdamW, clipping), measured in one run and
printed as ratios — of all tokens a step processes, and of the trained (assistant) tokens, which
packing (`data.packing: true`, tessera only) raises. The conversations are examples/sft's, prepared by
`tessera data prepare --chat`; unpacked, both sides train on the samples `tessera data samples` lists
(one conversation per sample, padded).

Usage (after tools/setup.sh): bash bench/run_sft.sh [--steps N] [--rounds R]
Prints two tables; copy them into bench/RESULTS.md with the date and machine.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

import peft
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from throughput_common import interleaved_medians, parse_bench_args, print_ratios, run_pretrained, step_lines  # noqa: E402
from throughput_common import gemm_floor_seconds, torch_step_seconds  # noqa: E402

# The Llama benchmark's model (bench/llama_throughput.py) with the example tokenizer's vocabulary.
from llama_throughput import BATCH, FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, SEQ, draw  # noqa: E402
RANK, ALPHA = 16, 32
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class SftSamples:
    """The global samples `tessera data samples` lists: (inputs, targets, trained) per batch."""

    def __init__(self, tessera, tmp, model_dir, data, count):
        spec = os.path.join(tmp, "samples.yaml")
        with open(spec, "w") as f:
            f.write(f"name: samples\nmodel: {{pretrained: {model_dir}, seq_len: {SEQ}}}\ndata: {{path: {data}}}\n")
        done = subprocess.run([tessera, "data", "samples", spec, "--count", str(count)], check=True,
                              capture_output=True, text=True)
        self.rows = [json.loads(line) for line in done.stdout.splitlines()]

    def batch(self, indices, trim=False):
        """`trim`: the positions after the batch's last trained target left out (what a collator
        padding to the batch's longest conversation does, and what tessera's SFT loss skips)."""
        rows = [self.rows[g % len(self.rows)] for g in indices]
        tokens = torch.tensor([r["tokens"] for r in rows])
        trained = torch.tensor([r["trained"] for r in rows], dtype=torch.float32)
        if trim:
            keep = int(trained.any(0).nonzero().max()) + 1 if trained.any() else trained.size(1)
            tokens, trained = tokens[:, :keep + 1], trained[:, :keep]
        return tokens[:, :-1], (tokens[:, 1:], trained)


class Trimmed:
    """SftSamples whose batches are trimmed (SftSamples.batch(trim=True))."""

    def __init__(self, samples):
        self.samples = samples

    def batch(self, indices):
        return self.samples.batch(indices, trim=True)


def sft_objective(model, vocab):
    def objective(x, y):
        targets, trained = y
        logits = model(input_ids=x).logits
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="none")
        return (ce * trained.reshape(-1)).sum() / trained.sum().clamp_min(1)
    return objective


def transformers_tokens_per_s(model_dir, samples, vocab, steps, warmup, threads, lora, trim=False):
    """(tokens/s, trained tokens/s) of the median step; tokens/s counts every position of the padded
    batch even when `trim` leaves the trailing ones out."""
    torch.set_num_threads(threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if lora:
        model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                                           target_modules=TARGETS, task_type="CAUSAL_LM"))
    model.train()
    secs = statistics.median(torch_step_seconds(model, sft_objective(model, vocab), Trimmed(samples) if trim else samples,
                                                steps, BATCH)[warmup:])
    trained = statistics.median(float(samples.batch(range(s * BATCH, (s + 1) * BATCH))[1][1].sum())
                                for s in range(warmup, steps))
    return BATCH * SEQ / secs, trained / secs


def tessera_tokens_per_s(tessera, tmp, model_dir, data, steps, warmup, threads, lora, packing=False):
    """(tokens/s, trained tokens/s) of the median step."""
    sets = [f"data.packing={str(packing).lower()}"]
    if lora:
        sets += [f"model.lora.rank={RANK}", f"model.lora.alpha={ALPHA}", f"model.lora.targets=[{', '.join(TARGETS)}]"]
    lines = step_lines(run_pretrained(tessera, tmp, model_dir, data, SEQ, BATCH, steps, threads, sets), warmup)
    secs = statistics.median(line["step_seconds"] for line in lines)
    return BATCH * SEQ / secs, statistics.median(line["trained_tokens"] for line in lines) / secs


def gemm_floor_tokens_per_s(vocab, threads, lora):
    """Tokens/s of a step doing nothing but the peer's linear layers' GEMMs (throughput_common.
    gemm_floor_seconds) over every position of the batch: q, k, v, o, gate, up, down per block and the
    head; full fine-tuning computes every weight's gradient, LoRA none of the base's but the adapters'
    (x·Aᵀ [r] then ·Bᵀ on the seven linears)."""
    tokens = BATCH * SEQ
    kv = KV_HEADS * (HIDDEN // HEADS)
    block = [(HIDDEN, HIDDEN), (HIDDEN, kv), (HIDDEN, kv), (HIDDEN, HIDDEN), (HIDDEN, FFN), (HIDDEN, FFN), (FFN, HIDDEN)]
    linears = []
    for _ in range(LAYERS):
        for k, n in block:
            linears.append(((tokens, k, n), not lora))
            if lora:
                linears += [((tokens, k, RANK), True), ((tokens, RANK, n), True)]
    linears.append(((tokens, HIDDEN, vocab), not lora))
    return tokens / gemm_floor_seconds(linears, threads)


def main():
    args = parse_bench_args(ROOT, 20)
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp()
    data = os.path.join(tmp, "sft")
    subprocess.run([args.tessera, "data", "prepare", "--no-progress", "--tokenizer", os.path.join(ROOT, "examples", "sft"),
                    "--chat", os.path.join(ROOT, "examples", "sft", "chats.jsonl"), data], check=True)
    vocab = len(transformers.PreTrainedTokenizerFast.from_pretrained(os.path.join(ROOT, "examples", "sft")))
    model_dir = os.path.join(tmp, "llama")
    draw(model_dir, vocab)
    samples = SftSamples(args.tessera, tmp, model_dir, data, args.steps * BATCH)
    full, lora = "full fine-tuning", f"LoRA r{RANK} on {len(TARGETS)} linears"
    runs = {}

    def measure(name, fn):
        def once():
            tokens, trained = fn()
            runs.setdefault(name, []).append(trained)
            return tokens
        return (name, once)

    configs = []
    for kind, is_lora, peer in [(full, False, "transformers LlamaForCausalLM"), (lora, True, f"transformers + peft {peft.__version__}")]:
        for packing in (False, True):
            configs.append(measure(f"tessera run, {kind}, {'packed' if packing else 'padded'}, {cores} threads",
                                   lambda l=is_lora, p=packing: tessera_tokens_per_s(args.tessera, tmp, model_dir, data,
                                                                                      args.steps, args.warmup, cores, l, p)))
        for trim in (False, True):
            configs.append(measure(f"{peer}, {kind}, {'trimmed' if trim else 'padded'}, eager, {cores} threads",
                                   lambda l=is_lora, t=trim: transformers_tokens_per_s(model_dir, samples, vocab,
                                                                                       args.steps, args.warmup, cores,
                                                                                       l, t)))
    rows = interleaved_medians(configs, args.rounds)
    print(f"SFT on examples/sft's conversations (one per sample padded to {SEQ + 1} tokens, or packed): Llama "
          f"{LAYERS}L/{HIDDEN}h/{HEADS}heads/{KV_HEADS}kv/ffn{FFN}/vocab{vocab}, batch {BATCH}, fp32, {cores} cores, "
          f"torch {torch.__version__}, transformers {transformers.__version__}; median step of steps "
          f"{args.warmup + 1}..{args.steps}, median of {args.rounds} interleaved rounds")
    print("tokens/s (every position of the padded batch, per second of its step; 'trimmed' left out the positions "
          "after the batch's last trained target, as tessera's SFT loss does unpacked):")
    print_ratios(rows[:4], rows[2][0], width=80)
    print_ratios(rows[4:], rows[6][0], width=80)
    for i in (0, 4):
        print(f"  {rows[i][0]}: {rows[i][1] / rows[i + 3][1]:.2f}x the trimmed peer")
    print("trained tokens/s (assistant tokens whose loss is trained):")
    trained = [(name, statistics.median(runs[name])) for name, _ in rows]
    print_ratios(trained[:4], trained[2][0], width=80)
    print_ratios(trained[4:], trained[6][0], width=80)
    for i, (kind, is_lora) in enumerate([(full, False), (lora, True)]):
        floor = gemm_floor_tokens_per_s(vocab, cores, is_lora)
        peer = rows[4 * i + 2][1]
        print(f"GEMM floor, {kind} (the peer's linear-layer GEMMs alone, timed in isolation): {floor:.0f} tokens/s, "
              f"{floor / peer:.2f}x the peer — what the peer's arithmetic could reach at best (tessera's SFT "
              f"skips the last block's MLP and the head on untrained positions, so it can pass it)")

if __name__ == "__main__":
    main()
