#!/usr/bin/env bash
# Installs everything tessera needs on Debian 12, idempotently: Debian packages (Bazel, gRPC,
# protobuf, Abseil, yaml-cpp, GoogleTest, ...) and LibTorch from the PyPI wheel torch==2.11.0.
# Works as root or through sudo, waits for the apt lock, and reuses what is already installed.
set -euo pipefail

TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=4.57.1
PEFT_VERSION=0.17.1
TENSORBOARD_VERSION=2.21.0
TORCHAO_VERSION=0.15.0
TRL_VERSION=0.24.0
DATASETS_VERSION=4.3.0
PACKAGES=(
  bazel-bootstrap build-essential pkg-config python3 python3-venv python3-yaml
  protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc libabsl-dev
  libyaml-cpp-dev libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libgloo-dev
  libsqlite3-dev libpcre2-dev prometheus-cpp-dev prometheus curl patchelf libssl-dev clang libclang-rt-14-dev ccache
  chromium libnss3-tools fonts-dejavu-core
)

log() { printf 'setup: %s\n' "$*" >&2; }

if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else
  log "run as root or install sudo"; exit 1; fi
APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -q)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  "${APT[@]}" update >/dev/null
  "${APT[@]}" install --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages: all present"
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
has_torch() {
  "$@" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null
}
# Used by tests only: the other side's own code for interop (transformers' models and checkpoints,
# the tokenizers library it depends on, for token ids, peft for LoRA adapters, and tensorboard's own
# reader for the event files, torchao's Float8Linear for the FP8 layers, TRL for the preference and
# RL objectives' data and losses, with the datasets library it imports).
ensure_transformers() {
  if ! "$1" -c "import transformers, tokenizers" 2>/dev/null; then
    log "installing transformers==$TRANSFORMERS_VERSION (tests only)"
    "$1" -m pip install -q --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION"
  fi
  if ! "$1" -c "import peft, sys; sys.exit(0 if peft.__version__ == '$PEFT_VERSION' else 1)" 2>/dev/null; then
    log "installing peft==$PEFT_VERSION (tests only)"
    "$1" -m pip install -q --disable-pip-version-check "peft==$PEFT_VERSION" "torch==$TORCH_VERSION" \
      "transformers==$TRANSFORMERS_VERSION"
  fi
  if ! "$1" -c "import tensorboard, sys; sys.exit(0 if tensorboard.__version__ == '$TENSORBOARD_VERSION' else 1)" \
      2>/dev/null; then
    log "installing tensorboard==$TENSORBOARD_VERSION (tests only)"
    "$1" -m pip install -q --disable-pip-version-check "tensorboard==$TENSORBOARD_VERSION"
  fi
  if ! "$1" -c "import trl, datasets, sys; sys.exit(0 if (trl.__version__, datasets.__version__) == ('$TRL_VERSION', '$DATASETS_VERSION') else 1)" \
      2>/dev/null; then
    log "installing trl==$TRL_VERSION and datasets==$DATASETS_VERSION (tests only)"
    "$1" -m pip install -q --disable-pip-version-check "trl==$TRL_VERSION" "datasets==$DATASETS_VERSION" \
      "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" "peft==$PEFT_VERSION"
  fi
  # --no-deps: torchao's Float8 training is pure Python; its C++ extensions (built for another torch)
  # are skipped at import with a warning.
  if ! "$1" -c "import torchao, sys; sys.exit(0 if torchao.__version__ == '$TORCHAO_VERSION' else 1)" 2>/dev/null; then
    log "installing torchao==$TORCHAO_VERSION (tests only)"
    "$1" -m pip install -q --disable-pip-version-check --no-deps "torchao==$TORCHAO_VERSION"
  fi
}
if has_torch "$here/python.sh"; then
  log "torch $TORCH_VERSION: present ($("$here/python.sh" -c 'import sys; print(sys.executable)'))"
  ensure_transformers "$("$here/python.sh" -c 'import sys; print(sys.executable)')"
  exit 0
fi

# A venv of our own: Debian's python3 is externally managed (PEP 668).
venv="${HOME:-/root}/.cache/tessera/venv"
if [ ! -x "$venv/bin/python3" ]; then
  log "creating $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
py="$venv/bin/python3"
pip=("$py" -m pip install -q --disable-pip-version-check)
log "installing torch==$TORCH_VERSION (the CPU part is used on CPU; CUDA libraries load lazily)"
"${pip[@]}" --no-deps "torch==$TORCH_VERSION"
"${pip[@]}" numpy filelock "typing-extensions>=4.10" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5"
if ! has_torch "$py"; then
  # libtorch_cuda needs these at import when the CUDA toolkit's copies are not on the machine.
  log "adding the CUDA libraries torch needs at import"
  "${pip[@]}" --no-deps nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile
fi
if ! has_torch "$py"; then
  log "installing torch with all its dependencies"
  "${pip[@]}" "torch==$TORCH_VERSION"
fi
has_torch "$py" || { log "torch $TORCH_VERSION does not import; see the messages above"; exit 1; }
ensure_transformers "$py"
log "torch $TORCH_VERSION: installed in $venv"
