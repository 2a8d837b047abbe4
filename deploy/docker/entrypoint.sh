#!/bin/sh
# corral image entrypoint: the first argument selects the process.
#   run | worker | agent-worker | backend | models | nats-auth-setup | up   -> corral <mode> [flags]
#   --version | --help                                                     -> corral --version / --help
#   -...                                                                   -> corral run -... (flags only)
#   anything else                                                          -> executed as given (sh, python, ...)
# The mode and the pid are recorded for corral-healthcheck (which endpoint to probe) and corral-drain
# (which process to SIGTERM): CORRAL_RUN_DIR, default /tmp.
# CORRAL_PREPARE_DEFAULT_MODELS=true: before `run`, write the default models (one per modality, shipped
# in the image) and their configs into LOCALAI_MODELS_PATH; files already there are kept.
set -eu
run_dir="${CORRAL_RUN_DIR:-/tmp}"
record() {
    mkdir -p "$run_dir"
    printf '%s\n' "$1" > "$run_dir/corral-mode"
    printf '%s\n' "$$" > "$run_dir/corral.pid"
}
if [ "$#" -eq 0 ]; then
    set -- run
fi
case "$1" in
    run|worker|agent-worker|backend|models|nats-auth-setup|up)
        if [ "$1" = run ] && [ "${CORRAL_PREPARE_DEFAULT_MODELS:-false}" = true ]; then
            corral models prepare "${LOCALAI_MODELS_PATH:-./models}"
        fi
        record "$1"
        exec corral "$@"
        ;;
    --version|-V|--help|-h|help)
        exec corral "$@"
        ;;
    -*)
        record run
        exec corral run "$@"
        ;;
    *)
        exec "$@"
        ;;
esac
