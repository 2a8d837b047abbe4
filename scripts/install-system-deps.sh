#!/bin/sh
# System packages corral needs that pip cannot provide: the PostgreSQL server binaries (for the
# embedded default of `corral up` and the tests when no server runs), a C/C++ toolchain and cmake
# (to build llama-cpp-python once), iproute2 (network namespaces of the multi-host tests), chromium (the
# web UI's browser tests drive the distribution's headless Chromium through Playwright), promtool (checks the
# shipped alert rules and dashboard queries). Installs only what is missing; needs apt and root for that.
set -e
missing=""
if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    missing="$missing postgresql"
fi
command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"  # the multi-host tests' network namespaces
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
[ -x /usr/bin/chromium ] || missing="$missing chromium"  # tests/e2e/test_web_ui.py
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"  # promtool: tests/e2e/test_deploy_dashboards.py
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$missing python3-venv"
[ -z "$missing" ] && exit 0
echo "installing system packages:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
