#!/usr/bin/env bash
# Runs the Python that has tessera's torch wheel: $TESSERA_PYTHON, else the venv made by
# tools/setup.sh ($HOME/.cache/tessera/venv), else python3. Bazel's torch repository uses the same order.
if [ -n "${TESSERA_PYTHON:-}" ]; then exec "$TESSERA_PYTHON" "$@"; fi
if [ -x "${HOME:-/root}/.cache/tessera/venv/bin/python3" ]; then exec "${HOME:-/root}/.cache/tessera/venv/bin/python3" "$@"; fi
exec python3 "$@"
