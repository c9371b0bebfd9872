#!/usr/bin/env bash
# Builds the tessera container image without a registry (none is reachable from the project's
# machines): a minimal Debian 12 made by debootstrap from Debian's own packages, holding exactly the
# Debian packages the binaries link against, imported into podman as the base; then deploy/Containerfile
# adds the release binaries (tools/install.sh, stripped) and LibTorch's CPU libraries on top.
#   bash deploy/container/build.sh [--systemd | --cuda] [IMAGE]   (default localhost/tessera:latest)
# --systemd: the same image with systemd in it and deploy/systemd's units installed (their ExecStart
# paths, /usr/local/bin/tessera-*, link to /opt/tessera/bin), to boot with /sbin/init as PID 1
# (deploy/systemd/test_units.sh).
# --cuda: the GPU variant (default localhost/tessera-cuda:latest): also tessera-rank-cuda and
# tessera-generate-cuda with LibTorch's CUDA libraries and the CUDA toolkit's they load (tools/install.sh
# --cuda). The driver's libcuda.so.1 is not in it: run it with the host's GPUs and driver made visible,
# e.g. `podman run --device nvidia.com/gpu=all` with the NVIDIA Container Toolkit's CDI spec.
# Prints the image's size and what it holds. The base is reused while the package list is unchanged.
# Env: TESSERA_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/container/env.sh
systemd=0 cuda=0
case "${1:-}" in
  --systemd) systemd=1; shift ;;
  --cuda) cuda=1; shift ;;
esac
default_image=localhost/tessera:latest
[ $cuda = 0 ] || default_image=localhost/tessera-cuda:latest
image="${1:-$default_image}"
work="$PWD/out/image"
rm -rf "$work"
mkdir -p "$work/context"

# 1. The binaries under /opt/tessera, LibTorch's libraries beside them ($ORIGIN rpaths); symbols
#    stripped (libtorch_cpu.so: 431 MB → 342 MB).
install_flags=()
[ $cuda = 0 ] || install_flags=(--cuda)
bash tools/install.sh "${install_flags[@]}" "$work/context/opt/tessera" >"$work/install.log" 2>&1 ||
  { tail -20 "$work/install.log"; exit 1; }
strip --strip-unneeded "$work/context/opt/tessera/bin/"* "$work/context/opt/tessera/lib/tessera/"*.so*
install -m 0755 deploy/container/healthcheck "$work/context/opt/tessera/bin/tessera-healthcheck"

# 2. The Debian packages that own the system libraries the binaries load (libc, gRPC, protobuf, ...).
packages="$(for b in "$work/context/opt/tessera/bin/"tessera*; do ldd "$b" 2>/dev/null || true; done |
  awk '/=> \// {print $3}' | grep -E '^/(usr/)?lib(64)?/' | sort -u | while read -r lib; do
    dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null ||
      { echo "error: no Debian package owns $lib" >&2; exit 1; }
  done | cut -d: -f1 | sort -u | tr '\n' ',')"
packages="${packages%,}"
[ $systemd = 1 ] && packages+=",systemd,systemd-sysv"
base="localhost/tessera-base:bookworm-$( (echo "$packages"; [ $systemd = 0 ] || cat deploy/systemd/*.service) |
  sha256sum | cut -c1-12)"

# 3. The base: debootstrap's minbase plus those packages, trimmed, with the unprivileged user.
if ! podman image exists "$base"; then
  mirror="${TESSERA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  rootfs="$work/rootfs"
  mkdir -p "${HOME:-/root}/.cache/tessera/debootstrap"
  echo "debootstrap bookworm from $mirror with: ${packages//,/ }"
  debootstrap --variant=minbase --include="$packages" --cache-dir="${HOME:-/root}/.cache/tessera/debootstrap" \
    bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
  before="$(du -sm "$rootfs" | cut -f1)"
  # Nothing in the image installs packages or reads documentation: apt's lists and caches, the docs,
  # manuals and translations go (dpkg's database stays, so `dpkg -l` still says what is inside).
  rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*
  chroot "$rootfs" useradd --uid 10001 --user-group --no-log-init --home-dir /var/lib/tessera --create-home \
    --shell /usr/sbin/nologin tessera
  if [ $systemd = 1 ]; then
    cp deploy/systemd/*.service "$rootfs/etc/systemd/system/"
    for b in tessera tessera-coordinator tessera-worker tessera-rank tessera-generate tessera-score; do
      ln -s "/opt/tessera/bin/$b" "$rootfs/usr/local/bin/$b"
    done
  fi
  echo "base: minbase + ${packages//,/ }: ${before} MB, $(du -sm "$rootfs" | cut -f1) MB trimmed"
  tar -C "$rootfs" -c . | podman import --quiet --message "debootstrap bookworm minbase + tessera's libraries" - "$base" >/dev/null
  rm -rf "$rootfs"
fi

# 4. The image: base + /opt/tessera, non-root user, health check, default command (the coordinator).
previous="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
podman build --quiet --format docker --build-arg "BASE=$base" -f deploy/Containerfile -t "$image" "$work/context" >/dev/null
# The image this tag named before is dropped (unless a container still uses it): rebuilt images would
# otherwise pile up untagged (the CUDA variant is GBs).
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
size="$(podman image inspect --format '{{.Size}}' "$image")"
echo "image $image: $((size / 1000000)) MB (base $(( $(podman image inspect --format '{{.Size}}' "$base") / 1000000 )) MB," \
  "/opt/tessera $(du -sm "$work/context/opt/tessera" | cut -f1) MB)"
rm -rf "$work/context"  # The image holds it now.
