#!/usr/bin/env bash
# A throwaway 6-node Redis Cluster (3 masters, 3 replicas) on loopback, for
# kvoff's Redis tier: tests, benchmarks and users all start it here.
#
#   scripts/redis-cluster.sh up            start it (installs redis-server with apt-get
#                                          when missing), wait for cluster_state:ok, print
#                                          the seed URL as the last line
#   scripts/redis-cluster.sh down          stop exactly the nodes `up` started, remove their files
#   scripts/redis-cluster.sh kill-master   SIGKILL one master (not the seed); prints its port
#   scripts/redis-cluster.sh restart PORT  start a killed node again (it rejoins as a replica)
#   scripts/redis-cluster.sh status        cluster_state of the seed node
#   scripts/redis-cluster.sh install       only install redis-server and openssl when missing (.ci/run uses it)
#
# Environment: KVOFF_REDIS_PORT (first port, default 7100; six consecutive ports
# and their bus ports +10000 are used), KVOFF_REDIS_REPLICAS (1, or 0 for three
# masters alone), KVOFF_REDIS_DIR (node files, default
# under $TMPDIR), KVOFF_REDIS_TTL_S (if set, the cluster takes itself down after
# that many seconds, so a crashed test run leaves nothing behind).
#
# A secured cluster, as a shared tier should run (read by `up` and by every
# other command, so give the same values to each):
#   KVOFF_REDIS_REQUIREPASS=PASS  the default user needs PASS (requirepass; replicas
#                                 authenticate to their master with it too)
#   KVOFF_REDIS_ACL_USER=NAME:PASS  also an ACL user that may use only kvoff's keys
#                                 (~kvoff:*) and the commands kvoff sends
#   KVOFF_REDIS_TLS=1             TLS only: no plain-text port, TLS between nodes too,
#                                 client certificates required. `up` makes a CA, a
#                                 server and a client certificate with openssl under
#                                 $KVOFF_REDIS_DIR/tls (ca.crt, client.crt, client.key)
#                                 and prints a rediss:// URL.
set -euo pipefail

BASE=${KVOFF_REDIS_PORT:-7100}
DIR=${KVOFF_REDIS_DIR:-${TMPDIR:-/tmp}/kvoff-redis-cluster-$BASE}
# KVOFF_REDIS_REPLICAS=0: three masters and no replica (a cluster to check
# access with, at half the processes); 1 (default): a replica for each master.
REPLICAS=${KVOFF_REDIS_REPLICAS:-1}
case "$REPLICAS" in 0 | 1) ;; *) echo "redis-cluster: KVOFF_REDIS_REPLICAS must be 0 or 1" >&2; exit 2 ;; esac
PORTS=()
for i in $(seq 0 $((3 * (REPLICAS + 1) - 1))); do PORTS+=($((BASE + i))); done
WAIT_S=30

log() { echo "redis-cluster: $*" >&2; }

# redis-server and redis-cli, and openssl (the TLS cluster's certificates are made with it).
ensure_installed() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null &&
    command -v openssl >/dev/null; then
    return
  fi
  if ! command -v apt-get >/dev/null; then
    log "redis-server or openssl is missing and apt-get is not available: install Redis 7 and openssl yourself"
    exit 1
  fi
  log "installing redis-server and openssl with apt-get"
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "installing redis-server and openssl needs root (no sudo here)"
      exit 1
    fi
    sudo=(sudo)
  fi
  ${sudo[@]+"${sudo[@]}"} apt-get update -qq >&2
  # redis-tools (redis-cli) comes with redis-server as a dependency.
  # env after sudo: sudo resets the environment, so DEBIAN_FRONTEND must be set inside it.
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends redis-server openssl >&2
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null ||
    ! command -v openssl >/dev/null; then
    log "apt-get finished but redis-server, redis-cli or openssl is still not on PATH"
    exit 1
  fi
}

REQUIREPASS=${KVOFF_REDIS_REQUIREPASS:-}
ACL_USER=${KVOFF_REDIS_ACL_USER:-}
TLS=${KVOFF_REDIS_TLS:-}
TLS_DIR=$DIR/tls

# redis-cli as the cluster's administrator: the password in its environment
# (never in argv, where ps shows it), TLS options when the cluster has them.
cli() {
  local tls=() auth=()
  [ -z "$TLS" ] || tls=(--tls --cacert "$TLS_DIR/ca.crt" --cert "$TLS_DIR/client.crt" --key "$TLS_DIR/client.key")
  [ -z "$REQUIREPASS" ] || auth=("REDISCLI_AUTH=$REQUIREPASS")
  env ${auth[@]+"${auth[@]}"} redis-cli ${tls[@]+"${tls[@]}"} -h 127.0.0.1 -p "$1" "${@:2}"
}

state_ok() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | grep -q '^cluster_state:ok$'; }

# A CA, a server certificate for 127.0.0.1/localhost and a client certificate,
# all signed by that CA (P-256 keys: fast to make).
make_certs() {
  mkdir -p "$TLS_DIR"
  local d=$TLS_DIR
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=kvoff test CA" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  for who in server client; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=kvoff test $who" -keyout "$d/$who.key" -out "$d/$who.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/$who.ext"
    openssl x509 -req -in "$d/$who.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -extfile "$d/$who.ext" -out "$d/$who.crt" 2>/dev/null
  done
  chmod 600 "$d"/*.key
}

# The node's configuration file for the settings above: a file (mode 0600), so
# no password is in a process's argv.
node_conf() {
  local p=$1
  if [ -n "$TLS" ]; then
    printf 'port 0\ntls-port %s\ntls-cluster yes\ntls-replication yes\n' "$p"
    printf 'tls-cert-file %s\ntls-key-file %s\n' "$TLS_DIR/server.crt" "$TLS_DIR/server.key"
    printf 'tls-ca-cert-file %s\ntls-auth-clients yes\n' "$TLS_DIR/ca.crt"
  else
    printf 'port %s\n' "$p"
  fi
  if [ -n "$REQUIREPASS" ]; then
    printf 'requirepass %s\nmasterauth %s\n' "$REQUIREPASS" "$REQUIREPASS"
  fi
  if [ -n "$ACL_USER" ]; then
    # Only kvoff's keys, and only what kvoff sends (the cluster client's
    # discovery and handshake included); nothing that administers the node.
    printf 'user %s on >%s resetchannels ~kvoff:* -@all +get +set +exists +del +ping +hello +auth +client|setname +cluster|slots +cluster|shards +info +readonly\n' \
      "${ACL_USER%%:*}" "${ACL_USER#*:}"
  fi
}

start_node() {
  local p=$1
  mkdir -p "$DIR/$p"
  (umask 077 && node_conf "$p" >"$DIR/$p/node.conf")
  # --cluster-config-file is kept across restart so a killed node rejoins as itself.
  (cd "$DIR/$p" && redis-server "$DIR/$p/node.conf" --bind 127.0.0.1 --protected-mode yes \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
    --cluster-require-full-coverage no --save '' --appendonly no \
    --maxmemory 512mb --maxmemory-policy allkeys-lru --shutdown-on-sigterm 'nosave now' --repl-diskless-sync-delay 0 \
    --daemonize yes --pidfile "$DIR/$p/redis.pid" --logfile "$DIR/$p/redis.log" >/dev/null)
}

wait_ping() {
  local p=$1 t=0
  until cli "$p" ping >/dev/null 2>&1; do
    t=$((t + 1))
    if [ "$t" -gt $((WAIT_S * 10)) ]; then log "node $p did not answer"; exit 1; fi
    sleep 0.1
  done
}

up() {
  ensure_installed
  if state_ok "$BASE" && [ -f "$DIR/$BASE/redis.pid" ]; then
    seed_url
    return
  fi
  down_quiet
  [ -z "$TLS" ] || make_certs
  for p in "${PORTS[@]}"; do start_node "$p"; done
  for p in "${PORTS[@]}"; do wait_ping "$p"; done
  local hosts=()
  for p in "${PORTS[@]}"; do hosts+=("127.0.0.1:$p"); done
  cli "$BASE" --cluster create "${hosts[@]}" --cluster-replicas "$REPLICAS" --cluster-yes >/dev/null
  local t=0
  for p in "${PORTS[@]}"; do
    until state_ok "$p"; do
      t=$((t + 1))
      if [ "$t" -gt $((WAIT_S * 10)) ]; then log "cluster_state never became ok"; exit 1; fi
      sleep 0.1
    done
  done
  if [ -n "${KVOFF_REDIS_TTL_S:-}" ]; then
    # A watchdog in its own session: the cluster stops by itself even if its starter dies.
    setsid bash -c "sleep $KVOFF_REDIS_TTL_S; KVOFF_REDIS_PORT=$BASE KVOFF_REDIS_DIR='$DIR' '$0' down" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$DIR/watchdog.pid"
  fi
  log "${#PORTS[@]} nodes up on ports ${PORTS[0]}-${PORTS[-1]} (3 masters, $((3 * REPLICAS)) replicas)"
  seed_url
}

# The seed URL, without credentials (clients take those from their environment).
seed_url() {
  if [ -n "$TLS" ]; then echo "rediss://127.0.0.1:$BASE"; else echo "redis://127.0.0.1:$BASE"; fi
}

# True while `pid` runs (an exited process its parent has not reaped yet, a
# zombie, no longer counts: a daemonized node's parent may reap it late).
running() {
  kill -0 "$1" 2>/dev/null || return 1
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)
  [ "$state" != Z ]
}

down_quiet() {
  [ -d "$DIR" ] || return 0
  # SIGTERM to every node at once, then wait for all (at most 5 s), then SIGKILL.
  local pids=() f pid
  for p in "${PORTS[@]}"; do
    f=$DIR/$p/redis.pid
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && running "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$f"
  done
  for _ in $(seq 1 50); do
    local alive=0
    for pid in ${pids[@]+"${pids[@]}"}; do running "$pid" && alive=1; done
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  for pid in ${pids[@]+"${pids[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
  if [ -f "$DIR/watchdog.pid" ]; then
    local w
    w=$(cat "$DIR/watchdog.pid")
    # Only the watchdog's own session (not ourselves when the watchdog runs `down`).
    if [ "$w" != "$$" ] && [ "$w" != "$PPID" ]; then kill -TERM -- "-$w" 2>/dev/null || true; fi
    rm -f "$DIR/watchdog.pid"
  fi
  rm -rf "$DIR"
}

kill_master() {
  local line port
  # A connected master that is not the seed (so new clients still discover the cluster).
  while read -r line; do
    set -- $line
    port=${2%%@*}
    port=${port##*:}
    if [ "$port" != "$BASE" ]; then
      local pid
      pid=$(cat "$DIR/$port/redis.pid")
      kill -KILL "$pid"
      log "killed master on port $port (pid $pid)"
      echo "$port"
      return
    fi
  done < <(cli "$BASE" cluster nodes | tr -d '\r' | grep -E ' (myself,)?master ' | grep -v fail | grep connected)
  log "no master to kill"
  exit 1
}

case "${1:-}" in
  install) ensure_installed ;;
  up) up ;;
  down) down_quiet; log "stopped" ;;
  kill-master) kill_master ;;
  restart)
    [ -n "${2:-}" ] || { log "restart needs a port"; exit 2; }
    rm -f "$DIR/$2/redis.pid"
    start_node "$2"
    wait_ping "$2"
    echo "$2"
    ;;
  status) cli "$BASE" cluster info | tr -d '\r' | grep '^cluster_state' ;;
  *)
    echo "usage: $0 up|down|kill-master|restart PORT|status|install" >&2
    exit 2
    ;;
esac
