#!/usr/bin/env python3
"""Derives formats/data/nfc_tables.inc: the Unicode data of canonical composition (NFC) exactly as
the `tokenizers` library applies it (its NFC normalizer, which Qwen2's tokenizer.json names).

The library carries a newer Unicode version than Debian's Python, so the library is the authority:
- canonical combining classes are measured by asking its NFD whether a mark moves past reference
  marks of every class;
- full canonical decompositions are its NFD of each code point; the one-level mappings come from
  Python's unicodedata where they expand to the library's NFD, else from the library's NFD itself;
- primary composites are the code points with a two-character mapping that its NFC leaves alone.
The tables are then checked by an NFC written here from them against the library's NFC on every code
point and on sequences of marks, jamo and composites; any difference stops the script.
    tools/python.sh tools/unicode/derive_nfc_tables.py > formats/data/nfc_tables.inc
"""
import random
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers

NFD = normalizers.NFD()
NFC = normalizers.NFC()
CODE_POINTS = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
S_BASE, L_BASE, V_BASE, T_BASE, L_COUNT, V_COUNT, T_COUNT = 0xAC00, 0x1100, 0x1161, 0x11A7, 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def fail(message):
    sys.exit(f"derive_nfc_tables: {message}")


def nfd(s):
    return NFD.normalize_str(s)


def combining_classes():
    """ccc(m) > 0 iff m swaps with U+0334 (class 1) or U+0345 (class 240) in one order; its value r is
    the class of the reference mark it swaps with neither way."""
    candidates = {}
    for c in CODE_POINTS:
        r = unicodedata.combining(chr(c))
        if r and nfd(chr(c)) == chr(c):
            candidates.setdefault(r, []).append(chr(c))
    refs = {r: marks[0] for r, marks in candidates.items()}

    def swaps(a, b):  # Does canonical ordering put b before a?
        return a != b and nfd("a" + a + b) == "a" + b + a

    def conflicts(r, x):
        return sum((swaps(x, y) != (r > s)) or (swaps(y, x) != (s > r)) for s, y in refs.items() if s != r)

    # A reference whose class differs in the library (a newer Unicode) disagrees with the others: take
    # each class's least contradicted mark, then drop classes still contradicted.
    for _ in range(2):
        for r, marks in candidates.items():
            refs[r] = min(marks[:50], key=lambda x: conflicts(r, x))
    while True:
        bad = {r: sum((swaps(x, y) != (r > s)) or (swaps(y, x) != (s > r)) for s, y in refs.items() if s != r)
               for r, x in refs.items()}
        worst = max(bad, key=bad.get)
        if bad[worst] == 0:
            break
        del refs[worst]
    low, high = refs[1], refs[240]

    out = {}
    for c in CODE_POINTS:
        m = chr(c)
        if nfd(m) != m:
            continue  # Classes of decomposable characters are their decomposition's.
        if not (swaps(m, low) or swaps(high, m)):
            continue
        found = [r for r, x in refs.items() if not swaps(m, x) and not swaps(x, m)]
        if len(found) != 1:
            fail(f"U+{c:04X}: combining class not among the reference classes {sorted(refs)}")
        out[c] = found[0]
    return out


def decompositions():
    """One-level canonical mappings {cp: (first, second or None)} matching the library's NFD."""
    out = {}
    for c in CODE_POINTS:
        if S_BASE <= c < S_BASE + S_COUNT:
            continue
        full = nfd(chr(c))
        if full == chr(c):
            continue
        d = unicodedata.decomposition(chr(c))
        mapping = None
        if d and not d.startswith("<"):
            mapping = [int(x, 16) for x in d.split()]
        out[c] = mapping or [ord(x) for x in full]
        if len(out[c]) > 2:
            fail(f"U+{c:04X}: no one-level mapping of at most two characters")
    return out


class Normalizer:
    def __init__(self, ccc, decomp, compositions):
        self.ccc, self.decomp, self.compositions = ccc, decomp, compositions

    def decompose(self, c, out):
        if S_BASE <= c < S_BASE + S_COUNT:
            s = c - S_BASE
            out += [L_BASE + s // (V_COUNT * T_COUNT), V_BASE + s % (V_COUNT * T_COUNT) // T_COUNT]
            if s % T_COUNT:
                out.append(T_BASE + s % T_COUNT)
        elif c in self.decomp:
            for x in self.decomp[c]:
                self.decompose(x, out)
        else:
            out.append(c)

    def nfd(self, s):
        out = []
        for ch in s:
            self.decompose(ord(ch), out)
        for i in range(1, len(out)):  # Canonical ordering: a stable sort of each run of marks.
            j = i
            while j > 0 and self.ccc.get(out[j], 0) and self.ccc.get(out[j - 1], 0) > self.ccc.get(out[j], 0):
                out[j - 1], out[j] = out[j], out[j - 1]
                j -= 1
        return out

    def compose_pair(self, a, b):
        if L_BASE <= a < L_BASE + L_COUNT and V_BASE <= b < V_BASE + V_COUNT:
            return S_BASE + ((a - L_BASE) * V_COUNT + b - V_BASE) * T_COUNT
        if S_BASE <= a < S_BASE + S_COUNT and (a - S_BASE) % T_COUNT == 0 and T_BASE < b < T_BASE + T_COUNT:
            return a + b - T_BASE
        return self.compositions.get((a, b))

    def nfc(self, s):
        out, starter, last = [], None, -1
        for c in self.nfd(s):
            cc = self.ccc.get(c, 0)
            if starter is not None and not (last != -1 and last >= cc):
                p = self.compose_pair(out[starter], c)
                if p is not None:
                    out[starter] = p
                    continue
            if cc == 0:
                starter, last = len(out), -1
            else:
                last = cc
            out.append(c)
        return "".join(map(chr, out))


def main():
    ccc = combining_classes()
    decomp = decompositions()
    n = Normalizer(ccc, decomp, {})
    for c in decomp:
        if "".join(map(chr, n.nfd(chr(c)))) != nfd(chr(c)):
            fail(f"U+{c:04X}: the mapping {decomp[c]} does not expand to the library's NFD")
    compositions = {}
    for c, m in decomp.items():
        if len(m) == 2 and NFC.normalize_str(chr(c)) == chr(c):
            compositions[tuple(m)] = c
    n = Normalizer(ccc, decomp, compositions)
    checked = 0
    for c in CODE_POINTS:
        ch = chr(c)
        for s in (ch, "a" + ch + "\u0301", "a\u0301" + ch, "a\u0316" + ch, ch + "\u0308", ch + "\u0338", "\u1100" + ch,
                  "\uac00" + ch):
            if n.nfc(s) != NFC.normalize_str(s):
                fail(f"NFC of {s!r} differs from the library's")
            checked += 1
    rng = random.Random(1)
    pool = sorted(set(ccc) | set(decomp) | {x for m in decomp.values() for x in m} | set(range(0x1100, 0x1200)) |
                  set(range(0xAC00, 0xAC00 + 600)) | set(range(0x41, 0x5B)))
    for _ in range(200_000):
        s = "".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 8)))
        if n.nfc(s) != NFC.normalize_str(s):
            fail(f"NFC of {s!r} differs from the library's")
        checked += 1
    print(f"// Generated by tools/unicode/derive_nfc_tables.py from tokenizers {tokenizers.__version__}'s NFC")
    print(f"// (Python unicodedata {unicodedata.unidata_version} for one-level mappings); checked against it on {checked}")
    print("// strings. Do not edit.")
    print("// Canonical combining classes other than 0: {code point, class}, by code point.")
    print("constexpr CombiningClass kCombiningClasses[] = {")
    for c in sorted(ccc):
        print(f"    {{0x{c:04X}, {ccc[c]}}},")
    print("};")
    print("// One-level canonical decompositions: {code point, first, second (0: a singleton)}, by code point.")
    print("// Hangul syllables are decomposed by arithmetic, not listed.")
    print("constexpr Decomposition kDecompositions[] = {")
    for c in sorted(decomp):
        m = decomp[c] + [0]
        print(f"    {{0x{c:04X}, 0x{m[0]:04X}, 0x{m[1]:04X}}},")
    print("};")
    print("// Primary composites: {first, second, composite}, by (first, second).")
    print("constexpr Composition kCompositions[] = {")
    for (a, b), c in sorted(compositions.items()):
        print(f"    {{0x{a:04X}, 0x{b:04X}, 0x{c:04X}}},")
    print("};")


if __name__ == "__main__":
    main()
