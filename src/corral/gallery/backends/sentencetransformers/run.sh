#!/bin/sh
# Started by corral's worker as `run.sh --addr HOST:PORT` with cwd = this directory (the reference's convention).
# The installer created venv/ here from requirements.txt; models come staged by the worker, never from the hub.
set -e
dir="$(cd "$(dirname "$0")" && pwd)"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
exec "$dir/venv/bin/python" "$dir/backend.py" "$@"
