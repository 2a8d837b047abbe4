#!/usr/bin/env bash
# Copies the web UI's browser libraries from node_modules (pinned by package-lock.json) into
# src/corral/frontend/ui/vendor/, each with its licence. The copies are committed: the Python package ships
# them and running corral needs no npm. Run after `npm ci` when a version in package.json changes.
#
# The page has no build step and its CSP forbids inline scripts (so no import map): the one bare import
# specifier (preact/hooks → "preact") is rewritten to a relative path, and source-map comments are dropped
# (the maps are not shipped).
set -euo pipefail
cd "$(dirname "$0")/.."
NM=node_modules
OUT=src/corral/frontend/ui/vendor
test -d "$NM/preact" || { echo "node_modules is missing: run 'npm ci' first" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/preact" "$OUT/htm" "$OUT/uplot"

strip_maps() { sed -e '/^\/\/# sourceMappingURL=/d' -e 's|//# sourceMappingURL=[^ ]*$||'; }

strip_maps < "$NM/preact/dist/preact.mjs" > "$OUT/preact/preact.module.js"
strip_maps < "$NM/preact/hooks/dist/hooks.mjs" \
  | sed -e 's|from"preact"|from"./preact.module.js"|g' -e "s|from *'preact'|from'./preact.module.js'|g" \
  > "$OUT/preact/hooks.module.js"
cp "$NM/preact/LICENSE" "$OUT/preact/LICENSE"

strip_maps < "$NM/htm/dist/htm.module.js" > "$OUT/htm/htm.module.js"
cp "$NM/htm/LICENSE" "$OUT/htm/LICENSE"

cp "$NM/uplot/dist/uPlot.esm.js" "$OUT/uplot/uPlot.esm.js"
cp "$NM/uplot/dist/uPlot.min.css" "$OUT/uplot/uPlot.min.css"
cp "$NM/uplot/LICENSE" "$OUT/uplot/LICENSE"

# Every bare specifier left would fail in the browser: refuse to ship one.
if grep -nE '(from|import) ?["'"'"'][a-z@][^"'"'"' ]*["'"'"']' "$OUT"/*/*.js; then
  echo "a bare import specifier is left in $OUT" >&2; exit 1
fi
{
  echo "Vendored by scripts/vendor-ui.sh from the npm registry (see package-lock.json); do not edit by hand."
  for p in preact htm uplot; do echo "$p $(node -p "require('./$NM/$p/package.json').version")"; done
} > "$OUT/VERSIONS.txt"
echo "vendored into $OUT:"; cat "$OUT/VERSIONS.txt"
