"""Benchmark: GRPO (train.objective grpo) against its peers on the same transformers Llama (the bench's
4-layer, hidden-512 model, drawn by llama_throughput.draw), prompts (examples/grpo/prompts.jsonl with
examples/sft's tokenizer and chat template), group size, completion length, threads and optimizer,
measured in one run with interleaved rounds and printed as ratios:

- generation: tessera's sampler inside the job (steps.jsonl's generated_tokens_per_s: the step's
  generated tokens over its sampling seconds; a rank's prompts left-padded into one batch) against
  transformers' `generate` with its KV cache, sampling (top_k 0, top_p 1, temperature 1, the same
  EOS), in two batchings: each prompt's group as one batch, and every prompt's group in one
  left-padded batch (what TRL's GRPOTrainer does without vLLM);
- training: steps/s of `tessera run` (the median step_seconds: sampling, rewards, forward/backward,
  AdamW) against TRL's own GRPOTrainer.train() without vLLM (the median time between its
  on_step_begin and on_step_end callbacks), both loss_type dapo, beta 0, one reward function (the last
  number equals the row's answer).

An untrained model rarely samples the EOS, so both sides generate nearly every completion to its
limit; the token counts are each side's own.

Usage (after tools/setup.sh): bash bench/run_grpo.sh [--steps N] [--rounds R]
Prints a table; copy it into bench/RESULTS.md with the date and machine.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import datasets
import torch
import transformers
import trl
from trl import GRPOConfig, GRPOTrainer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, HERE)
from data_reference import read_indexed_dataset  # noqa: E402
from llama_throughput import FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, draw  # noqa: E402
from throughput_common import interleaved_medians, parse_bench_args, step_lines  # noqa: E402

PROMPTS, G, MAX_NEW, MICRO = 4, 8, 32, 16  # A step: 4 prompts × 8 completions of up to 32 tokens.
SEQ = 64


def tessera_run(tessera, tmp, model_dir, data, steps, warmup, threads):
    """(steps/s of the median step, generated tokens/s of the median step) of one `tessera run`."""
    out = os.path.join(tmp, f"run_{time.monotonic_ns()}")
    spec = os.path.join(tmp, "grpo.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: bench-grpo
model: {{pretrained: {model_dir}, seq_len: {SEQ}}}
data: {{path: {data}}}
train: {{objective: grpo, steps: {steps}, micro_batch: {MICRO}, global_batch: {PROMPTS}, lr: 1e-4,
        schedule: constant, grad_clip: 1.0}}
grpo: {{num_generations: {G}, max_completion_tokens: {MAX_NEW}, rewards: [{{name: correct, kind: exact_answer}}]}}
output_dir: {out}
""")
    subprocess.run([tessera, "run", spec, "--quiet", f"--threads-per-rank={threads}"], check=True)
    lines = step_lines(out, warmup)
    return (1.0 / statistics.median(line["step_seconds"] for line in lines),
            statistics.median(line["generated_tokens_per_s"] for line in lines))


def hf_generate_tokens_per_s(model_dir, prompts, stop, steps, warmup, threads, one_batch):
    """Generated tokens/s of transformers' generate, sampling G completions of each of PROMPTS prompts a
    step: per prompt (num_return_sequences G), or all at once left-padded (as TRL's GRPOTrainer)."""
    torch.set_num_threads(threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=MAX_NEW, eos_token_id=stop,
                  pad_token_id=stop, use_cache=True)
    rates = []
    for step in range(steps):
        batch = [prompts[(step * PROMPTS + j) % len(prompts)] for j in range(PROMPTS)]
        t0 = time.perf_counter()
        generated = 0
        with torch.no_grad():
            if one_batch:
                width = max(len(p) for p in batch)
                ids = torch.tensor([[stop] * (width - len(p)) + p for p in batch])
                mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
                out = model.generate(input_ids=ids, attention_mask=mask, num_return_sequences=G, **kwargs)
                generated += int(completion_tokens(out[:, width:], stop))
            else:
                for p in batch:
                    out = model.generate(input_ids=torch.tensor([p]), num_return_sequences=G, **kwargs)
                    generated += int(completion_tokens(out[:, len(p):], stop))
        rates.append(generated / (time.perf_counter() - t0))
    return statistics.median(rates[warmup:])


def completion_tokens(completions, stop):
    """Tokens of each completion up to and with its first stop token (the padding after it left out)."""
    ended = (completions == stop).int().cumsum(-1)
    return ((ended == 0) | ((ended == 1) & (completions == stop))).sum()


def last_number_reward(completions, answer, **kwargs):
    """1 when the last number of the completion equals the row's answer (tessera's exact_answer)."""
    out = []
    for c, a in zip(completions, answer):
        text = c[0]["content"] if isinstance(c, list) else c
        numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
        out.append(1.0 if numbers and numbers[-1] == a else 0.0)
    return out


class StepTimes(transformers.TrainerCallback):
    def __init__(self):
        self.seconds, self.start = [], 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self.start)


def trl_steps_per_s(model_dir, records, steps, warmup, threads):
    """Steps/s of the median step of TRL's GRPOTrainer.train() (transformers' generate, no vLLM)."""
    torch.set_num_threads(threads)
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(os.path.join(ROOT, "examples", "sft"))
    tokenizer.model_input_names = ["input_ids", "attention_mask"]  # A Llama takes no token_type_ids.
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=True, bf16=False, max_steps=steps,
                      per_device_train_batch_size=MICRO, gradient_accumulation_steps=PROMPTS * G // MICRO,
                      num_generations=G, max_completion_length=MAX_NEW, temperature=1.0, top_k=0, beta=0.0,
                      loss_type="dapo", learning_rate=1e-4, lr_scheduler_type="constant", max_grad_norm=1.0,
                      logging_steps=1, save_strategy="no", shuffle_dataset=False, disable_dropout=True)
    times = StepTimes()
    trainer = GRPOTrainer(model=model, reward_funcs=[last_number_reward], args=args,
                          train_dataset=datasets.Dataset.from_list(records), processing_class=tokenizer,
                          callbacks=[times])
    trainer.train()
    return 1.0 / statistics.median(times.seconds[warmup:])


def main():
    args = parse_bench_args(ROOT, 12)
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp()
    source = os.path.join(ROOT, "examples", "grpo", "prompts.jsonl")
    data = os.path.join(tmp, "prompts")
    subprocess.run([args.tessera, "data", "prepare", "--no-progress", "--tokenizer", os.path.join(ROOT, "examples", "sft"),
                    "--prompts", source, data], check=True)
    with open(data + ".prompts.json") as f:
        stop = json.load(f)["stop_token"]
    prompts = [list(map(int, d)) for d in read_indexed_dataset(data)[1]]
    with open(source) as f:
        records = [json.loads(line) for line in f]
    model_dir = os.path.join(tmp, "llama")
    vocab = len(transformers.PreTrainedTokenizerFast.from_pretrained(os.path.join(ROOT, "examples", "sft")))
    draw(model_dir, vocab)
    tessera_runs = {}

    def tessera_measure(which):
        def measure():
            key = len(tessera_runs.get("steps", []))
            if which == "steps":
                steps_per_s, tokens_per_s = tessera_run(args.tessera, tmp, model_dir, data, args.steps, args.warmup,
                                                        cores)
                tessera_runs.setdefault("steps", []).append(steps_per_s)
                tessera_runs.setdefault("tokens", []).append(tokens_per_s)
                return steps_per_s
            return tessera_runs["tokens"][key - 1]
        return measure

    names = {"t_steps": f"tessera run, train.objective grpo, {cores} threads",
             "trl": f"TRL {trl.__version__} GRPOTrainer.train(), no vLLM, {cores} threads",
             "t_gen": f"tessera's sampler in the job (every prompt's group in one batch)",
             "hf_each": f"transformers {transformers.__version__} generate, each prompt's group one batch",
             "hf_all": f"transformers {transformers.__version__} generate, every group in one batch (TRL's)"}
    rows = dict(interleaved_medians([
        (names["t_steps"], tessera_measure("steps")),
        (names["t_gen"], tessera_measure("tokens")),
        (names["trl"], lambda: trl_steps_per_s(model_dir, records, args.steps, args.warmup, cores)),
        (names["hf_each"], lambda: hf_generate_tokens_per_s(model_dir, prompts, stop, args.steps, args.warmup, cores,
                                                            False)),
        (names["hf_all"], lambda: hf_generate_tokens_per_s(model_dir, prompts, stop, args.steps, args.warmup, cores,
                                                           True)),
    ], args.rounds))
    print(f"GRPO on examples/grpo's prompts: Llama {LAYERS}L/{HIDDEN}h/{HEADS}heads/{KV_HEADS}kv/ffn{FFN}/vocab{vocab}, "
          f"{PROMPTS} prompts × {G} completions of up to {MAX_NEW} tokens a step, micro-batches of {MICRO}, fp32, "
          f"{cores} cores, torch {torch.__version__}; median step of steps {args.warmup + 1}..{args.steps}, median of "
          f"{args.rounds} interleaved rounds")
    print(f"{'training':85s} {'steps/s':>9s} {'vs TRL':>8s}")
    for key in ["t_steps", "trl"]:
        print(f"{names[key]:85s} {rows[names[key]]:9.3f} {rows[names[key]] / rows[names['trl']]:8.2f}")
    print(f"{'generation':85s} {'tokens/s':>9s} {'vs HF (its best)':>8s}")
    best = max(rows[names["hf_each"]], rows[names["hf_all"]])
    for key in ["t_gen", "hf_each", "hf_all"]:
        print(f"{names[key]:85s} {rows[names[key]]:9.0f} {rows[names[key]] / best:8.2f}")


if __name__ == "__main__":
    main()
