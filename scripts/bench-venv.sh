#!/usr/bin/env bash
# The benchmark tools' own virtual environment, .venv-bench, for benchmarks/serving.py: NVIDIA's aiperf (the
# load generator) with its many dependencies, kept apart from .venv so it moves none of corral's pins;
# vllm-router (the Rust router it compares with); gguf, for transformers to read Gemma's tokenizer out of
# the GGUF (aiperf tokenizes offline). And, in .venv-bench/llama-server, what `python -m llama_cpp.server`
# needs beyond .venv's packages (its `server` extra: starlette-context), installed --no-deps, so that
# .venv's own llama-cpp-python build serves with it on PYTHONPATH. Idempotent: a stamp names the pins.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv-bench
TOOLS=(aiperf==0.13.0 vllm-router==0.1.17 gguf==0.19.0)
SERVER_DEPS=("starlette-context>=0.3.6,<0.4")  # llama-cpp-python 0.3.36's pin
STAMP="$VENV/.installed-$(echo "${TOOLS[*]} ${SERVER_DEPS[*]}" | sha1sum | cut -c1-12)"

if [[ -f $STAMP ]]; then
    exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "${TOOLS[@]}"
"$VENV/bin/pip" install -q --no-deps --upgrade --target "$VENV/llama-server" "${SERVER_DEPS[@]}"
rm -f "$VENV"/.installed-*
touch "$STAMP"
echo "$VENV ready: ${TOOLS[*]}"
