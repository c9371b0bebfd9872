"""Tokenizer throughput: `tessera data prepare --tokenizer` (C++, end to end: JSON lines in, .bin/.idx
out) against the `tokenizers` library's `encode_batch` on the same documents already in memory (its
best case: no reading, no writing), 1 and 2 threads, interleaved rounds, medians. GPT-2 style and
Llama-3 style byte-level BPE tokenizers (vocabulary 16000) trained on the mixed-script corpus of
tests/python/tokenizer_parity_test.py. Run: bash bench/run_tokenizer.sh [--mb 16] [--rounds 3]."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from tokenizer_parity_test import LLAMA3_SPLIT, mixed_documents  # noqa: E402
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers  # noqa: E402

TESSERA = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bazel-bin", "client",
                                       "tessera"))

LIBRARY_RUN = r"""
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
tok.encode_special_tokens = True
docs = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
t = time.perf_counter()
tok.encode_batch(docs, add_special_tokens=False)
print(time.perf_counter() - t)
"""


def train(kind, docs, path):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=16000, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    tok.save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    docs = mixed_documents(int(args.mb * 1e6), seed=17)
    size = sum(len(d.encode()) for d in docs)
    corpus = os.path.join(tmp, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    print(f"corpus: {len(docs)} documents, {size / 1e6:.1f} MB of UTF-8 text")
    for kind in ("gpt2", "llama3"):
        tj = os.path.join(tmp, f"{kind}.json")
        train(kind, docs[:2000], tj)
        for threads in (1, 2):
            ours, theirs = [], []
            for _ in range(args.rounds):
                t = time.perf_counter()
                subprocess.run([TESSERA, "data", "prepare", "--tokenizer", tj, corpus, os.path.join(tmp, "out"),
                                "--threads", str(threads), "--no-progress"], check=True, capture_output=True)
                ours.append(time.perf_counter() - t)
                env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
                out = subprocess.run([sys.executable, "-c", LIBRARY_RUN, tj, corpus], env=env, check=True,
                                     capture_output=True, text=True).stdout
                theirs.append(float(out))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{kind} {threads} thread(s): tessera {size / 1e6 / a:6.2f} MB/s (end to end)   "
                  f"tokenizers {size / 1e6 / b:6.2f} MB/s (encode_batch only)   ratio {b / a:.2f}x")


if __name__ == "__main__":
    main()
