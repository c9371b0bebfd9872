# Sourced by the container scripts: installs what they need from Debian's packages when it is missing
# (podman with runc and netavark, debootstrap, iptables for container networks, patchelf for
# tools/install.sh, catatonit for pods) and points podman at deploy/container/containers.conf.
container_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="$container_dir/containers.conf"
missing=()
for cmd in podman:podman runc:runc debootstrap:debootstrap iptables:iptables patchelf:patchelf; do
  command -v "${cmd%%:*}" >/dev/null || missing+=("${cmd#*:}")
done
[ -x /usr/lib/podman/netavark ] || missing+=(netavark aardvark-dns)
# Pods (podman kube play, deploy/kubernetes/demo.sh) build their pause image around catatonit.
command -v catatonit >/dev/null || [ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "error: needs ${missing[*]} (apt-get install them as root)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
fi

# Helpers of the scripts that run containers (from the repository root).
fail() { echo "FAIL: $*" >&2; exit 1; }
# start_run NAME: a fresh log directory out/NAME/run-TIME in $run, and the host's CLI, built, in $cli.
start_run() {
  run="$PWD/out/$1/run-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$run"
  bazel build --disk_cache="${HOME:-/root}/.cache/tessera/bazel-disk" //client:tessera >"$run/bazel.log" 2>&1 ||
    { tail -20 "$run/bazel.log" >&2; fail "bazel build //client:tessera failed"; }
  cli="$PWD/bazel-bin/client/tessera"
}
# as_demo_user HOST: the CLI talks to the coordinator at HOST:7070 as the user "demo" of $run/certs.
as_demo_user() {
  export TESSERA_COORDINATOR="$1:7070" TESSERA_TLS_CA="$run/certs/ca.pem" \
    TESSERA_TLS_CERT="$run/certs/user-demo.pem" TESSERA_TLS_KEY="$run/certs/user-demo.key"
}
# wait_alive N WHAT: until N workers are ALIVE (30 s at most), then lists them; fails naming WHAT.
wait_alive() {
  alive() { "$cli" workers 2>/dev/null | grep -c ALIVE || true; }
  for _ in $(seq 150); do [ "$(alive)" -ge "$1" ] && break; sleep 0.2; done
  "$cli" workers
  [ "$(alive)" -ge "$1" ] || fail "$2 did not register"
}
# pm ARGS...: podman, its chatter (it cannot reach systemd for health-check timers or syslog here) kept
# in $run/podman.log and shown only when it fails.
pm() { podman "$@" 2>>"$run/podman.log" || { tail -5 "$run/podman.log" >&2; return 1; }; }
