#!/usr/bin/env bash
# A tessera cluster in containers: the coordinator and two workers, each a container of the image
# (deploy/container/build.sh; built first when missing) on their own container network
# 198.18.64.0/24 (internal: no default route, nothing outside reachable), all talking mutual TLS.
# From this host the CLI submits the demo GPT (dp=2 over the two workers) and follows it; the three
# /metrics endpoints are scraped; worker2's container is killed after the first checkpoint and started
# again, and the job resumes from that checkpoint and ends SUCCEEDED. Health checks run in each
# container. Everything (containers, network) is removed at the end; logs stay in RUN.
#   bash deploy/container/demo.sh [--keep]      (--keep: leave the cluster running)
# Exit 0 only when every check passed. Needs root (rootful podman; bridges and iptables).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/container/env.sh
keep=0
[ "${1:-}" = "--keep" ] && keep=1
image="${TESSERA_IMAGE:-localhost/tessera:latest}"
podman image exists "$image" || bash deploy/container/build.sh "$image"
net=tessera-demo
subnet=198.18.64
names=(tessera-demo-coordinator tessera-demo-worker1 tessera-demo-worker2)
start_run container-demo
stop_all() {
  for n in "${names[@]}"; do podman logs "$n" >"$run/$n.log" 2>&1 || true; done
  if [ $keep = 0 ]; then
    podman rm -f -t 5 "${names[@]}" >/dev/null 2>&1 || true
    podman network rm -f "$net" >/dev/null 2>&1 || true
  fi
  echo "logs in $run"
}
podman rm -f -t 0 "${names[@]}" >/dev/null 2>&1 || true
podman network rm -f "$net" >/dev/null 2>&1 || true
trap stop_all EXIT
pm network create --internal --subnet "$subnet.0/24" "$net" >/dev/null

# Certificates: each container gets only its own key (and the CA), owned by the image's user.
"$cli" certs init "$run/certs" --worker worker1 --worker worker2 --user demo --san "$subnet.10" --days 2 >/dev/null
give() {  # give DIR NAME: ca.pem + NAME.pem/.key into DIR
  mkdir -p "$1" && cp "$run/certs/ca.pem" "$run/certs/$2.pem" "$run/certs/$2.key" "$1/"
  chown -R 10001 "$1" && chmod 0700 "$1"
}
give "$run/certs-coordinator" coordinator
give "$run/certs-worker1" worker-worker1
give "$run/certs-worker2" worker-worker2
# Data read-only under /data; outputs (checkpoints, which a resumed attempt reads) shared under /out.
mkdir -p "$run/data" "$run/out" "$run/coordinator-state"
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
"$cli" data prepare "$text" "$run/data/demo.bin" >/dev/null
chown -R 10001 "$run/out" "$run/coordinator-state"
common=(--network "$net" --health-interval disable -v "$run/data:/data:ro" -v "$run/out:/out")
# (The health check runs with `podman healthcheck run` below: podman's periodic timer needs systemd.)

pm run -d --name tessera-demo-coordinator --ip "$subnet.10" "${common[@]}" \
  -v "$run/certs-coordinator:/etc/tessera/certs:ro" -v "$run/coordinator-state:/var/lib/tessera" "$image" >/dev/null
worker() {  # worker I: start worker I's container
  pm run -d --name "tessera-demo-worker$1" --ip "$subnet.1$1" "${common[@]}" \
    -v "$run/certs-worker$1:/etc/tessera/certs:ro" "$image" \
    tessera-worker --coordinator="$subnet.10:7070" --name="worker$1" --devices=cpu:1 --threads_per_rank=1 \
    --metrics_listen=0.0.0.0:9465 --work_dir=/var/lib/tessera/work --data_roots=/data --output_root=/out \
    --tls_ca=/etc/tessera/certs/ca.pem --tls_cert="/etc/tessera/certs/worker-worker$1.pem" \
    --tls_key="/etc/tessera/certs/worker-worker$1.key" >/dev/null
}
worker 1
worker 2

as_demo_user "$subnet.10"
wait_alive 2 "the two worker containers"
for n in "${names[@]}"; do
  pm healthcheck run "$n" >/dev/null || fail "$n is not healthy"
done
echo "health: ${names[*]} healthy"

job="$("$cli" --output json submit examples/gpt-demo.yaml --max-restarts 2 --set data.path=/data/demo.bin \
  --set output_dir=/out/demo/gpt-demo |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "submitted $job"
json() { "$cli" --output json job "$job"; }
field() { json | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
for _ in $(seq 600); do
  [ "$(field 'int(j.get("progress", {}).get("last_checkpoint_step", 0))')" -ge 50 ] && break; sleep 0.2
done
[ "$(field 'int(j.get("progress", {}).get("last_checkpoint_step", 0))')" -ge 50 ] || { json; fail "no checkpoint at step 50"; }

# Metrics of all three daemons, from this host over the container network.
for target in "$subnet.10:9464" "$subnet.11:9465" "$subnet.12:9465"; do
  python3 - "$target" <<'PY' || fail "metrics of $target"
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
series = [l for l in body.splitlines() if l.startswith("tessera_")]
assert series, "no tessera_ series"
print(f"metrics {sys.argv[1]}: {len(series)} tessera_ series, e.g. {series[0]}")
PY
done

# The dashboard, over HTTPS with the user's certificate, lists the running job.
page="$(curl -sS --max-time 10 --cacert "$run/certs/ca.pem" --cert "$run/certs/user-demo.pem" \
  --key "$run/certs/user-demo.key" "https://$subnet.10:9480/ui")" || fail "dashboard of the coordinator"
grep -q "data-job=\"$job\" data-state=\"RUNNING\"" <<<"$page" || fail "the dashboard does not list $job as RUNNING"
echo "dashboard https://$subnet.10:9480/ui: $job RUNNING, $(grep -o 'signed in as [a-z]*' <<<"$page")"

echo "killing worker2's container at checkpoint step $(field 'j["progress"]["last_checkpoint_step"]')"
pm kill tessera-demo-worker2 >/dev/null
for _ in $(seq 300); do [ "$(field 'int(j.get("attempt", 1))')" -ge 2 ] && break; sleep 0.2; done
echo "job now: $(field 'j["state"]'), attempt $(field 'j.get("attempt", 1)')"
pm start tessera-demo-worker2 >/dev/null
echo "worker2's container started again"
status=0
"$cli" follow "$job" || status=$?
"$cli" job "$job"
[ $status = 0 ] || fail "the job did not succeed"
field 'j["state"]' | grep -qx JOB_STATE_SUCCEEDED || fail "state is not SUCCEEDED"
resumed="$(field 'max(int(a.get("resumed_from_step", 0)) for a in j["history"])')"
[ "$resumed" -ge 50 ] || fail "no attempt resumed from a checkpoint (resumed_from_step $resumed)"
echo "container demo: SUCCEEDED; an attempt resumed from step $resumed after worker2's container was killed"
