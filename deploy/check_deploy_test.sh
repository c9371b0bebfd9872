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
cat >"$tmp/secrets.yaml" <<'YAML'
apiVersion: v1
kind: Secret
metadata: {name: tessera-coordinator-tls}
data: {ca.pem: eA==}
---
apiVersion: v1
kind: Secret
metadata: {name: tessera-worker-tls}
data: {ca.pem: eA==}
YAML
python3 deploy/kubernetes/play.py check deploy/kubernetes/tessera.yaml "$tmp/secrets.yaml" ||
  fail "deploy/kubernetes/tessera.yaml does not check"
sed 's/key: STORE_PORTS}/key: STORE_PORT}/' deploy/kubernetes/tessera.yaml >"$tmp/broken.yaml"
if python3 deploy/kubernetes/play.py check "$tmp/broken.yaml" "$tmp/secrets.yaml" 2>"$tmp/err"; then
  fail "a configMapKeyRef to a missing key passed the check"
fi
grep -q "no key STORE_PORT in tessera-config" "$tmp/err" || fail "the broken reference is not named: $(cat "$tmp/err")"
if python3 deploy/kubernetes/play.py check deploy/kubernetes/tessera.yaml 2>"$tmp/err"; then
  fail "manifests without their Secrets passed the check"
fi
echo "kubernetes: manifests check; broken references are refused by name"
echo "deploy checks passed"
