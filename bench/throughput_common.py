"""What the throughput benchmarks against PyTorch share (bench/*_throughput.py): the byte-level corpus
they train on, the interleaved rounds with medians, and the ratio table."""
import os
import statistics

import numpy as np


def write_corpus(directory, root):
    """DIR/tokens.bin: byte-level tokens (uint16) of the GPL text (or the README); returns its path."""
    data = os.path.join(directory, "tokens.bin")
    gpl = "/usr/share/common-licenses/GPL-3"
    text = open(gpl, "rb").read() if os.path.exists(gpl) else open(os.path.join(root, "README.md"), "rb").read()
    np.frombuffer(text, dtype=np.uint8).astype("<u2").tofile(data)
    return data


def interleaved_medians(configs, rounds):
    """[(name, median)] of `rounds` interleaved rounds of every (name, measure) in `configs`: the
    machine is shared and noisy, and interleaving keeps a slow period from landing on one
    configuration only."""
    runs = {name: [] for name, _ in configs}
    for _ in range(rounds):
        for name, measure in configs:
            runs[name].append(measure())
    return [(name, statistics.median(v)) for name, v in runs.items()]


def print_ratios(rows, peer_name, width=55):
    """The tokens/s table, each row as a ratio to the row named `peer_name`."""
    peer = dict(rows)[peer_name]
    print(f"{'configuration':{width}s} {'tokens/s':>10s} {'vs transformers':>16s}")
    for name, v in rows:
        print(f"{name:{width}s} {v:10.0f} {v / peer:16.2f}")
