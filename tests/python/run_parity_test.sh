#!/usr/bin/env bash
# Runs gpt_parity_test.py with the Python that has torch 2.11 (tools/python.sh), from the runfiles root.
set -euo pipefail
exec tools/python.sh tests/python/gpt_parity_test.py
