#!/usr/bin/env bash
# Runs the parity test script $1 (gpt_parity_test.py, llama_parity_test.py) with the Python that has
# torch 2.11 and transformers (tools/python.sh), from the runfiles root.
set -euo pipefail
exec tools/python.sh "$1"
