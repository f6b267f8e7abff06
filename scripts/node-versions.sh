#!/usr/bin/env bash
# The main job and the runtime tests (real worker threads) on the Node.js
# majors above the engines floor: the whole suite runs on the floor (20), and
# these are where a change of V8 or of worker_threads would show. Each version
# comes from the registry's `node` package (its bin/node), into a scratch
# prefix removed afterwards. Needs dist/ built (npm run build).
#
#   bash scripts/node-versions.sh            # the versions below
#   bash scripts/node-versions.sh 22.23.3    # one version
set -euo pipefail
cd "$(dirname "$0")/.."

VERSIONS=("$@")
if [ ${#VERSIONS[@]} -eq 0 ]; then
  VERSIONS=(22.23.3 24.21.0)
fi

for version in "${VERSIONS[@]}"; do
  prefix=$(mktemp -d)
  trap 'rm -rf "$prefix"' EXIT
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$prefix" "node@$version"
  bin="$prefix/node_modules/node/bin"
  actual=$("$bin/node" --version)
  if [ "$actual" != "v$version" ]; then
    echo "node@$version installed $actual" >&2
    exit 1
  fi
  echo "== Node.js $actual: kvoff simulate (npm start) on the built dist"
  PATH="$bin:$PATH" "$bin/node" dist/src/cli.js simulate
  echo "== Node.js $actual: the runtime tests"
  PATH="$bin:$PATH" "$bin/node" node_modules/vitest/vitest.mjs run test/runtime
  rm -rf "$prefix"
  trap - EXIT
done
