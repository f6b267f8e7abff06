#!/usr/bin/env bash
# The Vulkan driver kvoff's WebGPU backend runs on where there is no GPU:
# Mesa's software device (llvmpipe, "lavapipe"). Dawn, behind the npm package
# `webgpu`, refuses the Mesa 22 of Debian 12 (its device lacks
# shaderUniform*ArrayDynamicIndexing) and takes Mesa 25, which Debian 12 ships
# in bookworm-backports; later Debian releases ship it in their main suite.
#
#   scripts/webgpu-driver.sh install   install mesa-vulkan-drivers >= 25 with apt-get
#                                      when missing (.ci/run uses it); on Debian 12
#                                      the bookworm-backports suite is added first
#   scripts/webgpu-driver.sh check     print the WebGPU adapter Node gets (needs
#                                      node_modules/webgpu); fails when there is none
set -euo pipefail
cd "$(dirname "$0")/.."

MESA_MAJOR_MIN=25
BACKPORTS_LIST=/etc/apt/sources.list.d/bookworm-backports.list

log() { echo "webgpu-driver: $*" >&2; }

mesa_major() {
  local v
  v=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' mesa-vulkan-drivers 2>/dev/null || true)
  # "ii  25.0.7-2~bpo12+1" when installed; anything else is not installed.
  case "$v" in
    ii*) v=${v##* } ;;
    *) echo 0; return ;;
  esac
  v=${v#*:} # an epoch, if any
  echo "${v%%.*}"
}

codename() {
  # shellcheck disable=SC1091
  (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
}

ensure_installed() {
  if [ "$(mesa_major)" -ge "$MESA_MAJOR_MIN" ]; then return; fi
  if ! command -v apt-get >/dev/null; then
    log "Mesa's Vulkan driver (>= $MESA_MAJOR_MIN) is missing and apt-get is not available: install mesa-vulkan-drivers $MESA_MAJOR_MIN or later yourself"
    exit 1
  fi
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "mesa-vulkan-drivers >= $MESA_MAJOR_MIN is missing and installing it needs root (no sudo here)"
      exit 1
    fi
    sudo=(sudo)
  fi
  local target=()
  if [ "$(codename)" = bookworm ]; then
    # Debian 12's own Mesa is 22.3: take the backports suite's.
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      log "adding the bookworm-backports suite ($BACKPORTS_LIST)"
      echo 'deb http://deb.debian.org/debian bookworm-backports main' |
        ${sudo[@]+"${sudo[@]}"} tee "$BACKPORTS_LIST" >/dev/null
    fi
    target=(-t bookworm-backports)
  fi
  log "installing mesa-vulkan-drivers ${target[*]:-} with apt-get"
  ${sudo[@]+"${sudo[@]}"} apt-get update -qq >&2
  # env after sudo: sudo resets the environment, so DEBIAN_FRONTEND must be set inside it.
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends ${target[@]+"${target[@]}"} mesa-vulkan-drivers >&2
  local major
  major=$(mesa_major)
  if [ "$major" -lt "$MESA_MAJOR_MIN" ]; then
    log "apt-get installed mesa-vulkan-drivers $major; Dawn needs $MESA_MAJOR_MIN or later"
    exit 1
  fi
}

check() {
  # The package's own entry, as kvoff loads it (src/runtime/webgpu-device.ts).
  node --input-type=module -e '
    const { create, globals } = await import("webgpu");
    Object.assign(globalThis, globals);
    let gpu = create([]);
    const adapter = await gpu.requestAdapter();
    if (adapter === null) {
      console.error("webgpu-driver: no WebGPU adapter (is mesa-vulkan-drivers >= 25 installed?)");
      process.exit(1);
    }
    const { vendor, architecture, device, description } = adapter.info;
    console.log([description, vendor, architecture, device].filter(Boolean).join(" / "));
    gpu = undefined;
    process.exit(0);
  '
}

case "${1:-}" in
  install) ensure_installed ;;
  check) check ;;
  *)
    echo "usage: $0 install|check" >&2
    exit 2
    ;;
esac
