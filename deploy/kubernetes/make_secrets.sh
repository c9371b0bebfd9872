#!/usr/bin/env bash
# Kubernetes Secrets from a `tessera certs init` directory, on stdout:
#   tessera-coordinator-tls  ca.pem, coordinator.pem, coordinator.key
#   tessera-worker-tls       ca.pem and every worker-NODE.pem / worker-NODE.key (each worker pod uses
#                            its node's pair; see tessera.yaml)
# Users' certificates stay with the users.
#   bash deploy/kubernetes/make_secrets.sh CERTS_DIR > secrets.yaml
set -euo pipefail
dir="${1:?usage: make_secrets.sh CERTS_DIR}"
[ -r "$dir/ca.pem" ] && [ -r "$dir/coordinator.pem" ] || { echo "error: $dir is not a tessera certs directory" >&2; exit 2; }
secret() {  # secret NAME FILE...
  echo "---"
  echo "apiVersion: v1"
  echo "kind: Secret"
  echo "metadata: {name: $1, labels: {app.kubernetes.io/part-of: tessera}}"
  echo "type: Opaque"
  echo "data:"
  shift
  for f in "$@"; do echo "  $(basename "$f"): $(base64 -w0 "$f")"; done
}
secret tessera-coordinator-tls "$dir/ca.pem" "$dir/coordinator.pem" "$dir/coordinator.key"
secret tessera-worker-tls "$dir/ca.pem" "$dir"/worker-*.pem "$dir"/worker-*.key
