"""What the preference parity tests (DPO, reward models) share: seeded pairs, the ChatML tokenizer they are
prepared with, `tessera data prepare --preference` of them read back as ids, the layouts each objective
is checked in, the check of a run's evaluations against TRL's, and a preference example run as its
comment says."""
import json
import os
import random
import subprocess

import transformers
from transformers import PreTrainedTokenizerFast

import chat_template_test as ct
import hf_testing
from data_reference import read_indexed_dataset

WORDS = "the cat sat on a mat while two dogs ran past an old barn and a farmer laughed yes no maybe".split()


def pair_records(n, seed, margins=False):
    """Seeded single-turn pairs: a short question, a chosen answer that repeats the question's words, a
    rejected one of other words (so a model can learn to prefer chosen); with `margins`, each a "margin"
    in [0, 1)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        q = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        record = {"prompt": [{"role": "user", "content": " ".join(q)}],
                  "chosen": [{"role": "assistant", "content": " ".join(q[: rng.randint(1, len(q))])}],
                  "rejected": [{"role": "assistant",
                                "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))}]}
        if margins:
            record["margin"] = round(rng.random(), 3)
        out.append(record)
    return out


def chatml_tokenizer(tmp):
    """chat_template_test's small tokenizer with ChatML, saved under tmp/tokenizer: (its directory, the
    transformers tokenizer read back from it)."""
    fast = PreTrainedTokenizerFast(tokenizer_object=ct.small_tokenizer(), bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = ct.CHATML
    directory = os.path.join(tmp, "tokenizer")
    fast.save_pretrained(directory)
    return directory, PreTrainedTokenizerFast.from_pretrained(directory)


def prepare_pairs(tessera, tokenizer_dir, records, prefix):
    """`tessera data prepare --preference` of `records` into `prefix`: each pair's (prompt, chosen,
    rejected) ids as the dataset holds them."""
    source = prefix + ".jsonl"
    with open(source, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    done = subprocess.run([tessera, "data", "prepare", "--no-progress", "--tokenizer", tokenizer_dir,
                           "--preference", source, prefix], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _, docs = read_indexed_dataset(prefix)
    return [tuple(list(map(int, docs[3 * i + k])) for k in range(3)) for i in range(len(records))]


# Every layout a preference objective is checked in against TRL: (name, --set overrides).
LAYOUTS = [("single", []), ("dp2", ["parallel.dp=2"]), ("tp2", ["parallel.tp=2"]),
           ("pp2", ["parallel.pp=2"]), ("sp2", ["parallel.sp=2"]),
           ("sp2_all_to_all_tp2", ["parallel.sp=2", "parallel.sp_mode=all_to_all", "parallel.tp=2"]),
           ("pp2_zb1p", ["parallel.pp=2", "parallel.pp_schedule=zb1p"]),
           ("zero1", ["parallel.dp=2", "parallel.zero_stage=1"]),
           ("zero2_checkpointed", ["parallel.dp=2", "parallel.zero_stage=2", "train.activation_checkpointing=true"]),
           ("zero3_offload", ["parallel.dp=2", "parallel.zero_stage=3", "optimizer.offload=cpu"])]
# A Mixture of Experts (Mixtral) without the balancing loss (transformers' output_router_logits false,
# TRL's default): one process, expert parallelism, tp and pp.
MOE_LAYOUTS = [("moe", []), ("moe_dp2_ep2", ["parallel.dp=2", "parallel.ep=2"]), ("moe_tp2", ["parallel.tp=2"]),
               ("moe_pp2", ["parallel.pp=2"])]


def mixtral_config(vocab, **extra):
    """The parity tests' tiny sizes as a Mixtral of 4 experts, 2 a token, no balancing loss unless `extra`
    says output_router_logits=True."""
    extra.setdefault("output_router_logits", False)
    from sft_parity_test import EPS, FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, THETA
    return transformers.MixtralConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=64, rms_norm_eps=EPS,
        rope_theta=THETA, tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=None, **extra)


# Grid tensor parallelism: each rank holds a chunk of a micro-batch's pairs (whole) and a part of the
# hidden dimension (with sp, of its sequence blocks: each sample's sums over them). 2.5D (depth 2) and 3D split the pairs 4 ways: micro-batches of 4 pairs (one a step;
# the same objective: the mean over the step's pairs).
GRID_LAYOUTS = [("grid_2d", ["parallel.tp=4", "parallel.tp_mode=2d"]),
                ("grid_2p5d", ["parallel.tp=8", "parallel.tp_mode=2.5d", "parallel.tp_depth=2", "train.micro_batch=4"]),
                ("grid_3d", ["parallel.tp=8", "parallel.tp_mode=3d", "train.micro_batch=4"]),
                ("grid_2d_pp2", ["parallel.tp=4", "parallel.tp_mode=2d", "parallel.pp=2"]),
                ("grid_2d_sp2", ["parallel.tp=4", "parallel.tp_mode=2d", "parallel.sp=2"])]


def run_example(test, tessera, rank, tmp, example, spec):
    """examples/SPEC as its comment says, for 3 steps from 3 steps of the SFT example: the SFT chats and
    examples/EXAMPLE/pairs.jsonl prepared with examples/sft's tokenizer. Returns (steps.jsonl's records,
    the run's output directory)."""
    env = dict(os.environ, TESSERA_RANK_BINARY=rank)
    sft_data, pairs = os.path.join(tmp, f"{example}-sft"), os.path.join(tmp, f"{example}-pairs")
    for kind, src, out in [("--chat", "examples/sft/chats.jsonl", sft_data),
                           ("--preference", f"examples/{example}/pairs.jsonl", pairs)]:
        done = subprocess.run([tessera, "data", "prepare", "--no-progress", "--tokenizer", "examples/sft", kind, src,
                               out], capture_output=True, text=True)
        test.assertEqual(done.returncode, 0, done.stderr)
    test.assertIn("300 pairs", done.stdout)
    sft_out, run_out = os.path.join(tmp, f"{example}-sft-run"), os.path.join(tmp, f"{example}-run")
    done = hf_testing.run_tessera(tessera, "examples/sft-llama.yaml",
                                  [f"data.path={sft_data}", f"output_dir={sft_out}", "train.steps=3",
                                   "checkpoint.every_steps=0"], env)
    test.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    start = os.path.join(sft_out, "checkpoints", "step_00000003", "model.safetensors")
    done = hf_testing.run_tessera(tessera, spec, [f"data.path={pairs}", f"output_dir={run_out}",
                                                  f"model.init_from={start}", "train.steps=3",
                                                  "checkpoint.every_steps=0"], env)
    test.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    with open(os.path.join(run_out, "steps.jsonl")) as f:
        steps = [json.loads(line) for line in f if "warning" not in line]
    test.assertEqual(len(steps), 3)
    return steps, run_out


def check_evaluations(test, name, steps, evals, metrics, tol):
    """Each evaluation of a run (steps.jsonl lines with val_loss) against TRL's `evals` {step: (loss,
    {metric: value})}: val_loss and val_<metric> within `tol` (relative where larger); steps without an
    evaluation in `evals` have none. Returns the largest difference."""
    worst = 0.0
    for s in steps:
        if s["step"] not in evals:
            test.assertNotIn("val_loss", s, f"{name} step {s['step']}")
            continue
        loss, values = evals[s["step"]]
        for key, got, expect in [("val_loss", s["val_loss"], loss)] + [
                (f"val_{k}", s[f"val_{k}"], values[k]) for k in metrics]:
            worst = max(worst, abs(got - expect))
            test.assertLessEqual(abs(got - expect), tol * max(1.0, abs(expect)),
                                 f"{name} step {s['step']} {key}: tessera {got} vs TRL {expect}")
    print(f"{name}: val_loss {[round(evals[k][0], 4) for k in sorted(evals)]}, max difference {worst:.2e} "
          "in the evaluation fields")
    return worst
