#!/usr/bin/env bash
# The main job: brings up a local tessera cluster on 127.0.0.1 — tessera-coordinator and two
# tessera-worker daemons with one CPU device each — submits the demo GPT (data-parallel over the two
# workers), follows it to the end, prints the final loss and the /metrics URLs, and shuts the
# cluster down. Every connection is mutual TLS with certificates made for this run (tessera certs
# init: a CA, the coordinator, worker1, worker2 and the user "demo"). Extra arguments go to
# `tessera submit` (e.g. --set train.steps=50).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${HOME:-/root}/.cache/tessera/bazel-disk"
mkdir -p "$cache" out/data
bazel build --disk_cache="$cache" //client:tessera //coordinator:tessera-coordinator //worker:tessera-worker \
  //worker/rank:tessera-rank
bin=bazel-bin
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
"$bin/client/tessera" data prepare "$text" out/data/demo.bin

run="out/cluster/run-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run"
pids=()
cleanup() {
  # Workers stop their ranks on SIGTERM; then the coordinator.
  for p in "${pids[@]:1}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[0]}" 2>/dev/null && wait "${pids[0]}" 2>/dev/null || true
  echo "cluster stopped; logs in $run"
}
trap cleanup EXIT

certs="$run/certs"
"$bin/client/tessera" certs init "$certs" --worker worker1 --worker worker2 --user demo --days 30 > /dev/null
tls() { echo "--tls_ca=$certs/ca.pem" "--tls_cert=$certs/$1.pem" "--tls_key=$certs/$1.key"; }
# Jobs read only under out/data and write only under RUN/USER (docs/security.md, "Paths").
roots="--data_roots=$PWD/out/data --output_root=$PWD/$run"

"$bin/coordinator/tessera-coordinator" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --ui_listen=127.0.0.1:0 \
  --db="$run/coordinator.db" $(tls coordinator) $roots > "$run/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "metrics on" "$run/coordinator.log" 2>/dev/null && break; sleep 0.1; done
addr="$(grep -o 'listening on [0-9.:]*' "$run/coordinator.log" | awk '{print $3}')"
coord_metrics="$(grep -o 'http://[0-9.:]*/metrics' "$run/coordinator.log")"
[ -n "$addr" ] || { cat "$run/coordinator.log"; exit 1; }
echo "coordinator on $addr (mutual TLS; certificates in $certs)"
echo "dashboard: $(grep -o 'https://[0-9.:]*/ui' "$run/coordinator.log") (a browser presents $certs/user-demo.pem: docs/dashboard.md)"

for i in 1 2; do
  "$bin/worker/tessera-worker" --coordinator="$addr" --devices=cpu:1 --threads_per_rank=1 --name="worker$i" \
    $(tls "worker-worker$i") $roots --work_dir="$run/worker$i" --metrics_listen=127.0.0.1:0 --store_ports="$((29490 + 10 * i))-$((29499 + 10 * i))" \
    > "$run/worker$i.log" 2>&1 &
  pids+=($!)
done
export TESSERA_COORDINATOR="$addr" TESSERA_TLS_CA="$certs/ca.pem" TESSERA_TLS_CERT="$certs/user-demo.pem" \
  TESSERA_TLS_KEY="$certs/user-demo.key"
for _ in $(seq 100); do [ "$("$bin/client/tessera" workers | grep -c ALIVE)" -ge 2 ] && break; sleep 0.1; done
"$bin/client/tessera" workers

status=0
"$bin/client/tessera" submit examples/gpt-demo.yaml --set "output_dir=$run/demo/gpt-demo" --follow "$@" || status=$?
"$bin/client/tessera" jobs
echo "metrics: $coord_metrics $(grep -ho 'http://[0-9.:]*/metrics' "$run"/worker*.log | tr '\n' ' ')"
exit $status
