"""The data formats and sample orders of docs/data-format.md, written here from the document (not from
tessera's code): an independent Megatron MMIDIDX writer, llm.c's header, the SplitMix64 permutation and
the blend's definition. Shared by the tests that check tessera against them."""
import struct

import numpy as np


def write_megatron(prefix, docs, dtype=np.uint16):
    """MMIDIDX: magic, version 1, dtype code, counts, lengths (int32), byte pointers (int64), document
    indices (int64, from 0); the .bin holds the documents' ids back to back."""
    code = {np.uint16: 8, np.int32: 4}[dtype]
    item = np.dtype(dtype).itemsize
    lengths = np.array([len(d) for d in docs], np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * item)]).astype(np.int64)
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(lengths.astype("<i4").tobytes() + pointers.astype("<i8").tobytes())
        f.write(np.arange(len(docs) + 1, dtype="<i8").tobytes())


def write_llmc(path, tokens):
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, "<u2").tobytes())


MASK = (1 << 64) - 1


def splitmix_permutation(n, seed):
    """docs/data-format.md: Fisher-Yates from the back with SplitMix64 draws."""
    p, state = list(range(n)), seed & MASK
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        j = z % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def blend_reference(sources, weights, seq, seed, shuffle, count):
    """docs/data-format.md "Blends": sample g from the source with the largest w_s(g+1) - c_s (lowest s
    on ties), that source's sample c_s; source s's windows shuffled with seed + s*2^32 + epoch."""
    total = 0.0
    for w in weights:
        total += w
    w = [x / total for x in weights]
    counts = [0] * len(sources)
    out = []
    for g in range(count):
        errors = [w[s] * float(g + 1) - float(counts[s]) for s in range(len(sources))]
        s = max(range(len(sources)), key=lambda k: (errors[k], -k))
        k = counts[s]
        counts[s] += 1
        tokens = sources[s]
        n = (len(tokens) - 1) // seq
        window = k % n
        if shuffle:
            window = splitmix_permutation(n, seed + (s << 32) + k // n)[k % n]
        out.append((s, k, window, tokens[window * seq:window * seq + seq + 1].tolist()))
    return out


def read_indexed_dataset(prefix):
    """An independent reader of Megatron's MMIDIDX format (docs/data-format.md)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", idx[:9]
    version, code, seqs, docs = struct.unpack_from("<QBQQ", idx, 9)
    assert version == 1
    dtype = {8: np.uint16, 4: np.int32}[code]
    at = 34
    lengths = np.frombuffer(idx, np.int32, seqs, at)
    pointers = np.frombuffer(idx, np.int64, seqs, at + 4 * seqs)
    doc_idx = np.frombuffer(idx, np.int64, docs, at + 12 * seqs)
    assert len(idx) == at + 12 * seqs + 8 * docs
    assert list(doc_idx) == list(range(seqs + 1)), "one sequence per document"
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    item = np.dtype(dtype).itemsize
    return code, [data[p // item:p // item + n].tolist() for p, n in zip(pointers, lengths)]
