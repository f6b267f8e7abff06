#!/bin/sh
# The `prepare` script: builds dist/ unless it is newer than every file in
# src/ and workers/. npm runs `prepare` after `npm ci`, and again each time
# `npx kvoff` installs this checkout into a fresh npx cache (a directory link);
# that second run found dist/ already built and recompiled it anyway, which
# made a newcomer's first `npx kvoff` a full compile (116 s on a loaded 2-core
# box). The test setup (test/helpers/global-setup.ts) uses the same rule.
#
#   sh scripts/build-if-stale.sh
set -eu
cd "$(dirname "$0")/.."
built=dist/src/index.js
if [ -f "$built" ] && [ -z "$(find src workers -type f -newer "$built" | head -n 1)" ]; then
  exit 0
fi
exec npm run build
