"""What the preference parity tests (DPO, reward models) share: seeded pairs, the ChatML tokenizer they are
prepared with, and `tessera data prepare --preference` of them read back as ids."""
import json
import os
import random
import subprocess

from transformers import PreTrainedTokenizerFast

import chat_template_test as ct
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
