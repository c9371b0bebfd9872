#!/usr/bin/env bash
# Coverage-guided fuzzing under AddressSanitizer + UndefinedBehaviorSanitizer (libFuzzer, Debian's
# clang and libclang-rt-14-dev): every target in turn, each for SECONDS (default 60) on its seed
# corpus in the repository (fuzz/corpus/TARGET; new inputs go to a scratch copy). A crash stops the
# script with the target's report and the input that caused it (keep it as a regression test).
# Usage: bash tools/fuzz.sh [SECONDS] [TARGET...]   Targets: spec tokenizer chat token_files checkpoint
#            trainer_state worker rpc.
#        bash tools/fuzz.sh --smoke [TARGET...]     The test suite's run: the corpus and 20,000
#            mutations from a fixed seed (deterministic), a JUnit file per target in $TESSERA_FUZZ_JUNIT.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
smoke=0
if [ "${1:-}" = "--smoke" ]; then smoke=1; seconds=0; else seconds="${1:-60}"; fi
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(spec tokenizer chat token_files checkpoint trainer_state worker rpc)
out="${TMPDIR:-/tmp}/tessera-fuzz"
mkdir -p "$out"
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -DTESSERA_LIBFUZZER -I. -I"$out/gen")
absl=(absl_strings absl_str_format absl_status absl_statusor absl_hash absl_raw_hash_set absl_synchronization absl_time)
# Each source is compiled on its own, through ccache where it is installed (tools/setup.sh), with
# the cache in ~/.cache/tessera/ccache: a source a commit did not touch (nor any header it includes)
# is not compiled again, in this checkout or a fresh clone elsewhere (the directory is not hashed;
# paths under the checkout are taken relative to it). Two compilers at a time (the machine's cores).
cxx=(clang++)
if command -v ccache >/dev/null; then
  cxx=(env CCACHE_DIR="${HOME:-/root}/.cache/tessera/ccache" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
       CCACHE_MAXSIZE=2G ccache clang++)
fi

# link_fuzzer NAME SOURCE... -- PKG-CONFIG-MODULE...: $out/NAME_fuzzer from the sources' objects.
link_fuzzer() {
  local name=$1 objs=() pids=() src obj
  shift
  mkdir -p "$out/obj"
  while [ "$1" != -- ]; do
    src=$1
    shift
    obj="$out/obj/$(printf '%s' "$src" | tr '/' '_').o"
    objs+=("$obj")
    "${cxx[@]}" "${flags[@]}" -c "$src" -o "$obj" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$(nproc)" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  shift
  for pid in "${pids[@]}"; do wait "$pid"; done
  # shellcheck disable=SC2046
  clang++ "${flags[@]}" "${objs[@]}" -o "$out/${name}_fuzzer" $(pkg-config --libs "$@")
}

# The generated protobuf (and gRPC) code of proto/, regenerated whenever the .proto files differ from
# the ones it was generated from ($out outlives the checkout: a stale copy does not compile).
protos() {
  local stamp
  stamp="$(cat proto/tessera/v1/*.proto | sha256sum | cut -d' ' -f1)"
  [ "$(cat "$out/gen/.done" 2>/dev/null)" = "$stamp" ] && return
  rm -rf "$out/gen"
  mkdir -p "$out/gen"
  protoc -Iproto --cpp_out="$out/gen" proto/tessera/v1/{job,cluster,coordinator_service,worker_service}.proto
  protoc -Iproto --grpc_out="$out/gen" --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" \
    proto/tessera/v1/{coordinator_service,worker_service}.proto
  echo "$stamp" > "$out/gen/.done"
}
spec_src=(spec/{job_spec,paths,pretrained,priority,spec_error,validate,validate_objective,yaml_to_proto,model_config_of,layout_of}.cc
          layout/{check_layout,modes,parallel_layout,rank_generator,tp_grid}.cc formats/model/hf_config.cc)

build_spec() {
  protos
  local src=(spec/spec_fuzz.cc "${spec_src[@]}" "$out/gen/tessera/v1/job.pb.cc")
  link_fuzzer spec "${src[@]}" -- protobuf yaml-cpp "${absl[@]}"
}

build_chat() {
  local src=(formats/chat/{chat_template_fuzz,chat_template,jinja_access,jinja_filters,jinja_globals,jinja_lexer,jinja_operators,jinja_parser,jinja_render,jinja_strings,jinja_value,py_case}.cc)
  link_fuzzer chat "${src[@]}" -- "${absl[@]}"
}

build_tokenizer() {
  local src=(formats/data/{tokenizer_fuzz,tokenizer,bpe_model,byte_level,nfc,onig_pattern,pre_tokenizer,regex}.cc common/text/utf8.cc)
  link_fuzzer tokenizer "${src[@]}" -- libpcre2-8 "${absl[@]}"
}

build_token_files() {
  local src=(formats/data/{token_file_fuzz,token_dataset,indexed_dataset}.cc)
  link_fuzzer token_files "${src[@]}" -- "${absl[@]}"
}

build_checkpoint() {
  local src=(formats/checkpoint/{checkpoint_fuzz,safetensors,checkpoint_dir,durable_file,crc32c}.cc)
  link_fuzzer checkpoint "${src[@]}" -- "${absl[@]}"
}

build_trainer_state() {
  local src=(formats/model/{trainer_state_fuzz,trainer_state}.cc)
  link_fuzzer trainer_state "${src[@]}" -- "${absl[@]}"
}

build_worker() {
  protos
  local src=(worker/{worker_fuzz,start_order}.cc common/steplog/step_log.cc "${spec_src[@]}"
             "$out/gen/tessera/v1/"{job,cluster,worker_service}.pb.cc)
  link_fuzzer worker "${src[@]}" -- protobuf yaml-cpp "${absl[@]}"
}

build_rpc() {
  protos
  local src=(coordinator/{rpc_fuzz,authorizer,coordinator,coordinator_heartbeats,coordinator_metrics,coordinator_recovery,coordinator_scheduling,coordinator_workers,coordinator_service,free_device_index,store_writer,worker_keys}.cc
             coordinator/{worker_service,worker_liveness,worker_orders,job_entry,stopping_ranks,job_queue,job_store,placement,scheduling_policy}.cc common/rpc/{status_conversion,tls}.cc common/time/clock.cc
             common/tls/{identity,certificates}.cc common/metrics/metrics_server.cc "${spec_src[@]}"
             "$out/gen/tessera/v1/"{job,cluster,coordinator_service,worker_service}.pb.cc
             "$out/gen/tessera/v1/"{coordinator_service,worker_service}.grpc.pb.cc)
  link_fuzzer rpc "${src[@]}" -- grpc++ protobuf yaml-cpp sqlite3 openssl prometheus-cpp-pull prometheus-cpp-core "${absl[@]}"
}

for t in "${targets[@]}"; do
  echo "fuzz: building $t" >&2
  "build_$t"
  rm -rf "$out/corpus-$t"
  mkdir -p "$out/corpus-$t"
  cp -r "fuzz/corpus/$t/." "$out/corpus-$t/"
  if [ $smoke = 1 ]; then budget=(-runs=20000 -seed=1); else budget=(-max_total_time="$seconds"); fi
  # rpc: gRPC 1.51's in-process transport keeps about 12 KB for each call that ends with an error
  # until the process exits (reachable, so LeakSanitizer does not call it a leak, but each such input
  # makes it scan the whole heap, 20x slower; the daemon over TCP keeps nothing: bench/RESULTS.md).
  # So leaks are not checked there, and a timed run restarts the process as it goes (fork mode).
  if [ "$t" = rpc ]; then
    budget+=(-detect_leaks=0)
    [ $smoke = 1 ] || budget+=(-fork=1)
  fi
  echo "fuzz: running $t (${budget[*]})" >&2
  (cd "$out" && "./${t}_fuzzer" "${budget[@]}" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 "corpus-$t" 2>&1 | tee "$out/$t.log" | grep -E "^(INFO|#[0-9]+ *DONE|stat::|==[0-9]+==ERROR)" || true)
  failed=0
  grep -q "ERROR: \|crash-\|timeout-\|oom-\|runtime error" "$out/$t.log" && failed=1
  if [ -n "${TESSERA_FUZZ_JUNIT:-}" ]; then
    mkdir -p "$TESSERA_FUZZ_JUNIT"
    { echo "<testsuite name=\"fuzz\"><testcase name=\"$t\" status=\"run\">"
      [ $failed = 1 ] && echo "<failure message=\"see $out/$t.log\"/>"
      echo "</testcase></testsuite>"; } > "$TESSERA_FUZZ_JUNIT/$t.xml"
  fi
  if [ $failed = 1 ]; then
    grep -v "^INFO\|^#" "$out/$t.log" | head -40 >&2
    echo "fuzz: $t FOUND A PROBLEM; see $out/$t.log and the crash-*/timeout-* file in $out" >&2
    exit 1
  fi
  echo "fuzz: $t $(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$t.log") with no crash" >&2
done
