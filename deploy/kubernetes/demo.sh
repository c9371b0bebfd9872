#!/usr/bin/env bash
# tessera's Kubernetes manifests (deploy/kubernetes/tessera.yaml) played with podman 4.3's `kube play`:
# the Secrets made from `tessera certs init` output (make_secrets.sh), every manifest checked
# (play.py check), and the Pods the StatefulSet and the DaemonSet would make (the coordinator and a
# worker on each of two "nodes") played on a container network of their own, 198.18.65.0/24
# (internal: no default route). From this host the CLI submits the demo GPT (dp=2 over the two
# workers) over mutual TLS and follows it to SUCCEEDED; each pod's /metrics (what the probes probe)
# and the dashboard are read on the way. Everything played is taken down at the end; logs stay in RUN.
#   bash deploy/kubernetes/demo.sh        Exit 0 only when the job SUCCEEDED and nothing is left running.
# Needs root (rootful podman). On a real cluster: make_secrets.sh > nodes.yaml, then kubectl apply
# -f nodes.yaml -f tessera.yaml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/container/env.sh
image="${TESSERA_IMAGE:-localhost/tessera:latest}"
podman image exists "$image" || bash deploy/container/build.sh "$image"
net=tessera-k8s-demo
subnet=198.18.65
start_run kubernetes-demo
python=(python3)
"${python[@]}" -c "import yaml" 2>/dev/null || python=(bash tools/python.sh)
take_down() {
  for p in tessera-coordinator-0 tessera-worker-node1 tessera-worker-node2; do
    podman pod logs "$p" >"$run/$p.log" 2>&1 || true
  done
  [ -f "$run/play.yaml" ] && podman kube down "$run/play.yaml" >>"$run/podman.log" 2>&1 || true
  podman network rm -f "$net" >/dev/null 2>&1 || true
  echo "logs in $run"
}
podman pod rm -f -t 0 tessera-coordinator-0 tessera-worker-node1 tessera-worker-node2 >/dev/null 2>&1 || true
podman network rm -f "$net" >/dev/null 2>&1 || true
trap take_down EXIT
pm network create --internal --subnet "$subnet.0/24" "$net" >/dev/null

# The Secrets, as an operator makes them; the coordinator's certificate names its Service and address.
"$cli" certs init "$run/certs" --worker node1 --worker node2 --user demo --san tessera-coordinator \
  --san "$subnet.10" --days 2 >/dev/null
bash deploy/kubernetes/make_secrets.sh "$run/certs" >"$run/nodes.yaml"
"${python[@]}" deploy/kubernetes/play.py render deploy/kubernetes/tessera.yaml "$run/nodes.yaml" "$run" \
  --nodes node1,node2 --coordinator-ip "$subnet.10" --set WORKER_DEVICES=cpu:1
# The data volume's content: the demo's tokens.
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
"$cli" data prepare "$text" "$run/volumes/tessera-data/demo.bin" >/dev/null
chown -R 10001:10001 "$run/volumes"
pm kube play --network "$net" --ip "$subnet.10" --ip "$subnet.11" --ip "$subnet.12" "$run/play.yaml" >/dev/null

as_demo_user "$subnet.10"
wait_alive 2 "the two worker pods"
# Each worker pod holds its own node's key alone, and runs without capabilities or a way to gain them.
for node in node1 node2; do
  held="$(podman exec "tessera-worker-$node-worker" ls /etc/tessera/certs | tr '\n' ' ')"
  [ "$held" = "ca.pem worker.key worker.pem " ] || fail "the $node pod holds: $held"
  podman exec "tessera-worker-$node-worker" grep -q "^CapEff:[[:space:]]*0000000000000000" /proc/1/status ||
    fail "the $node pod's worker has capabilities"
  podman exec "tessera-worker-$node-worker" grep -q "^NoNewPrivs:[[:space:]]*1" /proc/1/status ||
    fail "the $node pod's worker may gain privileges"
done
echo "worker pods: each holds its own node's key alone; no capabilities, no new privileges"
# What the probes probe: every pod's /metrics.
for target in "$subnet.10:9464" "$subnet.11:9465" "$subnet.12:9465"; do
  "${python[@]}" - "$target" <<'PY' || fail "/metrics of $target"
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
assert any(l.startswith("tessera_") for l in body.splitlines()), "no tessera_ series"
print(f"probe {sys.argv[1]}/metrics: ok")
PY
done

job="$("$cli" --output json submit examples/gpt-demo.yaml --set data.path=/data/demo.bin \
  --set output_dir=/out/demo/gpt-demo --set train.steps=40 --set train.eval_every=20 |
  "${python[@]}" -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "submitted $job"
page="$(curl -sS --max-time 10 --cacert "$run/certs/ca.pem" --cert "$run/certs/user-demo.pem" \
  --key "$run/certs/user-demo.key" "https://$subnet.10:9480/ui")" || fail "the dashboard"
grep -q "data-job=\"$job\"" <<<"$page" || fail "the dashboard does not list $job"
echo "dashboard https://$subnet.10:9480/ui lists $job"
status=0
"$cli" follow "$job" --timeout 600 || status=$?
"$cli" job "$job"
[ $status = 0 ] || fail "the job did not succeed"
"$cli" --output json job "$job" | "${python[@]}" -c \
  'import json,sys; s=json.load(sys.stdin)["state"]; sys.exit(0 if s == "JOB_STATE_SUCCEEDED" else 1)' ||
  fail "state is not SUCCEEDED"
trap - EXIT
take_down
left="$(podman ps -a --format '{{.Names}}' | grep -c '^tessera-\(coordinator-0\|worker-node\)' || true)"
[ "$left" = 0 ] || fail "$left containers of the demo are left"
echo "kubernetes demo: $job SUCCEEDED; the played pods are gone"
