# Sourced by the container scripts: installs what they need from Debian's packages when it is missing
# (podman with runc and netavark, debootstrap, iptables for container networks, patchelf for
# tools/install.sh) and points podman at deploy/container/containers.conf.
container_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="$container_dir/containers.conf"
missing=()
for cmd in podman:podman runc:runc debootstrap:debootstrap iptables:iptables patchelf:patchelf; do
  command -v "${cmd%%:*}" >/dev/null || missing+=("${cmd#*:}")
done
[ -x /usr/lib/podman/netavark ] || missing+=(netavark aardvark-dns)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "error: needs ${missing[*]} (apt-get install them as root)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
fi
