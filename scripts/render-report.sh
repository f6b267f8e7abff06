#!/usr/bin/env bash
# Renders a `kvoff simulate --report` page in headless Chromium and writes a
# PNG screenshot, to check that the page draws offline.
#
#   scripts/render-report.sh [report.html] [out.png]
#
# Without a report it runs `kvoff simulate` on its defaults to make one. Needs Debian's
# `chromium` package (apt-get install -y chromium); when it is absent the
# script says so and exits 0 (it is not part of CI).
# REPORT_WINDOW (default 1400,1000) sets the viewport, e.g. 1400,3000 for the whole page.
set -euo pipefail
# Paths given by the caller are relative to where it runs, not to the repository.
absolute() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }
report_arg="${1:+$(absolute "$1")}"
out_arg="$(absolute "${2:-report.png}")"
cd "$(dirname "$0")/.."

browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "render-report: skipped: chromium is not installed (apt-get install -y chromium)"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
report="$report_arg"
out="$out_arg"
if [ -z "$report" ]; then
  report="$tmp/report.html"
  # Exit 1 only means the run found holes (legacy policies); the page is still written.
  set +e
  npx tsx src/cli.ts simulate --report "$report" --json >"$tmp/simulate.json"
  code=$?
  set -e
  if [ "$code" -gt 1 ] || [ ! -s "$report" ]; then
    echo "render-report: kvoff simulate failed (exit $code)" >&2
    exit 1
  fi
fi

"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$tmp/profile" --screenshot="$out" \
  --window-size="${REPORT_WINDOW:-1400,1000}" "file://$(realpath "$report")" 2>"$tmp/chromium.log" || {
  echo "render-report: chromium failed:" >&2
  cat "$tmp/chromium.log" >&2
  exit 1
}
if [ ! -s "$out" ]; then
  echo "render-report: no screenshot written" >&2
  exit 1
fi
echo "render-report: wrote $out"
