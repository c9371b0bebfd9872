#!/usr/bin/env bash
# deploy/ is checked, not just written: Prometheus config with promtool, systemd units with
# systemd-analyze verify (pointing ExecStart at the freshly built binaries), the dashboard as JSON
# whose queries name only metrics the daemons export, the Kubernetes manifests' references (play.py
# check; a manifest with a broken one is refused).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
promtool check config deploy/prometheus/prometheus.yml || fail "promtool rejects deploy/prometheus/prometheus.yml"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for unit in deploy/systemd/*.service; do
  sed -e "s|/usr/local/bin/tessera-coordinator|$PWD/coordinator/tessera-coordinator|" \
      -e "s|/usr/local/bin/tessera-worker|$PWD/worker/tessera-worker|" "$unit" > "$tmp/$(basename "$unit")"
done
out="$(systemd-analyze verify "$tmp"/*.service 2>&1)" || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
python3 - deploy/grafana/tessera-dashboard.json coordinator/coordinator_metrics.h worker/worker_metrics.h <<'PY'
import json, re, sys
dash = json.load(open(sys.argv[1]))
exported = set()
for header in sys.argv[2:]:
    exported |= set(re.findall(r"(tessera_\w+)", open(header).read()))
used = set()
for panel in dash["panels"]:
    for t in panel["targets"]:
        used |= set(m for m in re.findall(r"(tessera_\w+)", t["expr"]))
base = {re.sub(r"_(bucket|count|sum)$", "", m) for m in used}
missing = sorted(m for m in base if m not in exported)
assert not missing, f"dashboard queries metrics nobody exports: {missing}"
print(f"dashboard: {len(dash['panels'])} panels, {len(base)} metrics, all exported")
PY
# The node manifests as an operator makes them (make_secrets.sh over a certs directory; the files'
# contents do not matter here): the coordinator's Secret, and per node its Secret and pinned worker.
mkdir -p "$tmp/certs"
for f in ca.pem coordinator.pem coordinator.key worker-node1.pem worker-node1.key worker-node2.pem worker-node2.key; do
  echo x >"$tmp/certs/$f"
done
bash deploy/kubernetes/make_secrets.sh "$tmp/certs" >"$tmp/nodes.yaml" || fail "make_secrets.sh failed"
python3 deploy/kubernetes/play.py check deploy/kubernetes/tessera.yaml "$tmp/nodes.yaml" ||
  fail "deploy/kubernetes/tessera.yaml does not check"
grep -q "name: tessera-worker-tls-node2" "$tmp/nodes.yaml" || fail "no Secret of node2's alone"
sed 's/key: STORE_PORTS}/key: STORE_PORT}/' "$tmp/nodes.yaml" >"$tmp/broken.yaml"
if python3 deploy/kubernetes/play.py check deploy/kubernetes/tessera.yaml "$tmp/broken.yaml" 2>"$tmp/err"; then
  fail "a configMapKeyRef to a missing key passed the check"
fi
grep -q "no key STORE_PORT in tessera-config" "$tmp/err" || fail "the broken reference is not named: $(cat "$tmp/err")"
if python3 deploy/kubernetes/play.py check deploy/kubernetes/tessera.yaml 2>"$tmp/err"; then
  fail "manifests without their Secrets passed the check"
fi
# A worker pod mounting another node's key, and pods that keep privileges, are refused by name.
sed 's/secretName: tessera-worker-tls-node2/secretName: tessera-worker-tls-node1/' "$tmp/nodes.yaml" >"$tmp/swapped.yaml"
if python3 deploy/kubernetes/play.py check deploy/kubernetes/tessera.yaml "$tmp/swapped.yaml" 2>"$tmp/err"; then
  fail "a worker pod with another node's key passed the check"
fi
grep -q "tessera-worker-node2: mounts tessera-worker-tls-node1 but is pinned to node node2" "$tmp/err" ||
  fail "the foreign key is not named: $(cat "$tmp/err")"
sed 's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/; s/type: RuntimeDefault/type: Unconfined/' \
  deploy/kubernetes/tessera.yaml >"$tmp/loose.yaml"
if python3 deploy/kubernetes/play.py check "$tmp/loose.yaml" "$tmp/nodes.yaml" 2>"$tmp/err"; then
  fail "a pod that may escalate privileges passed the check"
fi
grep -q "tessera-coordinator/coordinator: securityContext.allowPrivilegeEscalation is not false" "$tmp/err" &&
  grep -q "tessera-coordinator: securityContext.seccompProfile.type is not RuntimeDefault" "$tmp/err" ||
  fail "the privileges are not named: $(cat "$tmp/err")"
echo "kubernetes: manifests check; broken references, foreign keys and privileges are refused by name"
echo "deploy checks passed"
