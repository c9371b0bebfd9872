#!/usr/bin/env bash
# Coverage-guided fuzzing of the tokenizer (libFuzzer + AddressSanitizer, clang), on demand; the test
# suite runs the same property on seeded random inputs (parallel/data/tokenizer_fuzz_test.cc).
# Usage: bash tools/fuzz_tokenizer.sh [SECONDS, default 60]. Needs clang (Debian: clang, libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-60}"
out="${TMPDIR:-/tmp}/tessera-fuzz"
mkdir -p "$out/corpus"
src=(parallel/data/{tokenizer_fuzz,tokenizer,bpe_model,byte_level,onig_pattern,pre_tokenizer,regex,utf8}.cc)
# shellcheck disable=SC2046
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -DTESSERA_LIBFUZZER -I. "${src[@]}" \
  -o "$out/tokenizer_fuzzer" $(pkg-config --libs libpcre2-8 absl_strings absl_str_format absl_status \
  absl_statusor absl_hash absl_raw_hash_set)
printf 'hello world\n' > "$out/corpus/seed1"
printf "It's 12345 \xe2\x80\x94 na\xc3\xafve <tool> \xf0\x9f\x98\x80\r\n" > "$out/corpus/seed2"
"$out/tokenizer_fuzzer" -max_total_time="$seconds" -max_len=4096 "$out/corpus"
