#!/usr/bin/env bash
# The Python KV-event subscriber's packages: the tests decode kvoff's ZeroMQ
# events with Debian's python3-zmq and python3-msgpack (a client kvoff did not
# write), under /usr/bin/python3 (another python3 earlier on PATH may not see
# Debian's packages).
#
#   scripts/python-subscriber.sh install   install them with apt-get when missing (.ci/run uses it)
#   scripts/python-subscriber.sh check     exit 0 when /usr/bin/python3 imports both
set -euo pipefail

PYTHON=/usr/bin/python3
PACKAGES=(python3-zmq python3-msgpack)

log() { echo "python-subscriber: $*" >&2; }

present() { [ -x "$PYTHON" ] && "$PYTHON" -c 'import zmq, msgpack' >/dev/null 2>&1; }

install() {
  if present; then return; fi
  if ! command -v apt-get >/dev/null; then
    log "$PYTHON cannot import zmq and msgpack, and apt-get is not available: install ${PACKAGES[*]} yourself"
    exit 1
  fi
  log "installing ${PACKAGES[*]} with apt-get"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "installing ${PACKAGES[*]} needs root (no sudo here)"
      exit 1
    fi
    sudo=(sudo)
  fi
  ${sudo[@]+"${sudo[@]}"} apt-get update -qq >&2
  # env after sudo: sudo resets the environment, so DEBIAN_FRONTEND must be set inside it.
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${PACKAGES[@]}" >&2
  if ! present; then
    log "apt-get finished but $PYTHON still cannot import zmq and msgpack"
    exit 1
  fi
}

case "${1:-}" in
  install) install ;;
  check) present ;;
  *)
    echo "usage: $0 install|check" >&2
    exit 2
    ;;
esac
