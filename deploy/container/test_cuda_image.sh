#!/usr/bin/env bash
# The GPU image (deploy/container/build.sh --cuda), built and checked on a machine without a GPU:
#  - every binary and library in it resolves its libraries inside the image (ldd: none "not found"),
#    and the driver's libcuda.so.1 is not in it (the GPU host provides it);
#  - it is a superset of the CPU image: a small GPT trains on the CPU in it (tessera run, 4 steps);
#  - `tessera run --set device=cuda` runs tessera-rank-cuda, which loads LibTorch's CUDA libraries
#    and stops with the one-line error that names the missing device, as does `tessera generate
#    --device cuda` (tessera-generate-cuda); never a loader error or a crash;
#  - the rank runs as the image's user (uid 10001), not root.
# Training on a GPU in the image needs a machine with one and the NVIDIA Container Toolkit.
#   bash deploy/container/test_cuda_image.sh        Exit 0 only when every check passed. Needs root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/container/env.sh
image="${TESSERA_CUDA_IMAGE:-localhost/tessera-cuda:latest}"
bash deploy/container/build.sh --cuda "$image"
start_run cuda-image
mkdir -p "$run/data"
text=/usr/share/common-licenses/GPL-3
[ -r "$text" ] || text=README.md
"$cli" data prepare "$text" "$run/data/tokens.bin" >/dev/null
cat >"$run/data/spec.yaml" <<'SPEC'
name: cuda-image
model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32}
data: {path: /data/tokens.bin}
train: {steps: 4, micro_batch: 2, global_batch: 4, lr: 1e-3}
checkpoint: {every_steps: 4}
SPEC
# The checks run inside one container (no network), as the image's user; each prints one OK line.
podman run --rm --network none --health-interval disable -v "$run/data:/data:ro" "$image" bash -euo pipefail -c '
  fail() { echo "FAIL: $*"; exit 1; }
  [ "$(id -u)" = 10001 ] || fail "runs as uid $(id -u), not the image user 10001"
  missing="$(for f in /opt/tessera/bin/tessera* /opt/tessera/lib/tessera/*.so*; do
    ldd "$f" 2>/dev/null | sed -n "s|^[[:space:]]*\([^ ]*\) => not found|$f: \1|p"; done)"
  [ -z "$missing" ] || fail "libraries not found in the image: $missing"
  echo "OK: every library of $(ls /opt/tessera/bin /opt/tessera/lib/tessera | wc -l) files resolves in the image"
  ! ls /opt/tessera/lib/tessera/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* >/dev/null 2>&1 ||
    fail "the driver library libcuda.so is in the image"
  ls /opt/tessera/lib/tessera/libtorch_cuda.so /opt/tessera/lib/tessera/libcudnn_ops.so.* >/dev/null ||
    fail "LibTorch CUDA or cuDNN missing"
  out=/var/lib/tessera
  tessera run /data/spec.yaml --quiet --set output_dir=$out/cpu >$out/cpu.log 2>&1 || { cat $out/cpu.log; fail "the CPU run failed"; }
  [ "$(wc -l <$out/cpu/steps.jsonl)" = 4 ] || fail "the CPU run logged $(wc -l <$out/cpu/steps.jsonl) steps, not 4"
  echo "OK: a GPT trained 4 steps on the CPU in the image"
  set +e
  tessera run /data/spec.yaml --quiet --set output_dir=$out/gpu --set device=cuda >$out/gpu.log 2>&1; rc=$?
  set -e
  grep -q "device cuda:0 requested, but this build or machine has no CUDA" $out/gpu.log && [ $rc = 1 ] ||
    { cat $out/gpu.log; fail "device: cuda did not end with the no-CUDA error (exit $rc)"; }
  ! grep -q "error while loading shared libraries\|Segmentation\|Aborted" $out/gpu.log || { cat $out/gpu.log; fail "loader error or crash"; }
  echo "OK: tessera-rank-cuda loads LibTorch CUDA and says: $(grep -o "device cuda:0 requested[^;]*" $out/gpu.log | head -1)"
  set +e
  tessera generate $out/cpu/checkpoints --prompt-ids 3,1,4 --max-new-tokens 2 --device cuda >$out/gen.log 2>&1; rc=$?
  set -e
  grep -q -- "--device cuda: this machine has no CUDA device" $out/gen.log && [ $rc = 2 ] ||
    { cat $out/gen.log; fail "tessera generate --device cuda did not end with the no-CUDA error (exit $rc)"; }
  echo "OK: tessera-generate-cuda loads and says: $(grep -o -- "--device cuda: this machine has no CUDA device" $out/gen.log)"
' 2> >(grep -v "systemd connection" >&2)  # podman's chatter: it cannot reach systemd for health-check timers here.
echo "cuda image checks passed"
