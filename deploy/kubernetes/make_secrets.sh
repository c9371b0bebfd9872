#!/usr/bin/env bash
# The node-specific manifests from a `tessera certs init` directory, on stdout:
#   Secret tessera-coordinator-tls     ca.pem, coordinator.pem, coordinator.key
#   for each worker-NODE.pem/.key:
#     Secret tessera-worker-tls-NODE   ca.pem, worker.pem, worker.key (that node's pair alone)
#     DaemonSet tessera-worker-NODE    the worker pinned to NODE, mounting that Secret alone
#                                      (deploy/kubernetes/worker.yaml.in)
# Users' certificates stay with the users.
#   bash deploy/kubernetes/make_secrets.sh CERTS_DIR > nodes.yaml
set -euo pipefail
dir="${1:?usage: make_secrets.sh CERTS_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ -r "$dir/ca.pem" ] && [ -r "$dir/coordinator.pem" ] || { echo "error: $dir is not a tessera certs directory" >&2; exit 2; }
secret() {  # secret NAME KEY=FILE...
  echo "---"
  echo "apiVersion: v1"
  echo "kind: Secret"
  echo "metadata: {name: $1, labels: {app.kubernetes.io/part-of: tessera}}"
  echo "type: Opaque"
  echo "data:"
  shift
  for kv in "$@"; do echo "  ${kv%%=*}: $(base64 -w0 "${kv#*=}")"; done
}
secret tessera-coordinator-tls ca.pem="$dir/ca.pem" coordinator.pem="$dir/coordinator.pem" \
  coordinator.key="$dir/coordinator.key"
for pem in "$dir"/worker-*.pem; do
  [ -e "$pem" ] || continue
  node="$(basename "$pem" .pem)"
  node="${node#worker-}"
  # A Kubernetes node name (a DNS subdomain: lowercase letters, digits, '-' and '.'): it becomes object
  # and label names here.
  [[ "$node" =~ ^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$ ]] || { echo "error: $pem: '$node' is not a node name" >&2; exit 2; }
  [ -r "$dir/worker-$node.key" ] || { echo "error: no key $dir/worker-$node.key for $pem" >&2; exit 2; }
  secret "tessera-worker-tls-$node" ca.pem="$dir/ca.pem" worker.pem="$pem" worker.key="$dir/worker-$node.key"
  echo "---"
  sed "s/@NODE@/$node/g" "$here/worker.yaml.in"
done
