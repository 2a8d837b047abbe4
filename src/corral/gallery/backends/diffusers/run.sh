#!/bin/sh
# Started by corral's worker as `run.sh --addr HOST:PORT` with cwd = this directory (the reference's convention).
# The installer created venv/ here from requirements.txt and copied the shared backend code into common/
# (in the source tree it is ../common); models come staged by the worker, never from the hub.
set -e
dir="$(cd "$(dirname "$0")" && pwd)"
if [ -d "$dir/common" ]; then common="$dir/common"; else common="$dir/../common"; fi
export PYTHONPATH="$common${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
exec "$dir/venv/bin/python" "$dir/backend.py" "$@"
