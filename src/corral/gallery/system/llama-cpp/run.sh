#!/bin/sh
# corral's built-in llama-cpp engine as a backend in the reference's layout: the worker runs
# `run.sh --addr HOST:PORT` with cwd = this directory; CORRAL_PYTHON is the worker's own interpreter.
exec "${CORRAL_PYTHON:-python3}" -m corral backend llama-cpp "$@"
