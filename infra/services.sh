#!/usr/bin/env bash
# Make sure the servers the test suite talks to are up: Postgres, Redis and NATS (JetStream).
# Each is started from the machine's installed binaries only when nothing answers on its port.
#
#   infra/services.sh up [postgres] [redis] [nats]     (all three when none is named)
#
# make cluster names postgres and redis only: it runs a NATS cluster of its own on other ports.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.services"
mkdir -p "$state"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 1 100); do port_open "$1" && return 0; sleep 0.1; done
  echo "services: nothing answers on port $1 after starting $2" >&2; return 1
}

postgres_up() {
  port_open 5432 && return 0
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  if ! port_open 5432; then
    # No system cluster: a throwaway one of our own, trust auth, owned by the postgres user when we are root.
    local bindir
    bindir=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | head -n1)")
    local dir="$state/pg"
    local run=()
    if [ "$(id -u)" = 0 ]; then chown -R postgres "$state" 2>/dev/null || true; run=(runuser -u postgres --); fi
    [ -f "$dir/PG_VERSION" ] || "${run[@]}" "$bindir/initdb" -D "$dir" -U postgres --auth=trust >/dev/null
    "${run[@]}" "$bindir/pg_ctl" -D "$dir" -l "$state/pg.log" -o "-p 5432 -k /tmp -c listen_addresses=127.0.0.1" start >/dev/null
  fi
  wait_port 5432 postgres
}

redis_up() {
  port_open 6379 && return 0
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir "$state" --logfile "$state/redis.log"
  wait_port 6379 redis
}

nats_up() {
  port_open 4222 && return 0
  local exe
  exe=$(command -v nats-server || echo /usr/sbin/nats-server)
  mkdir -p "$state/nats"
  nohup "$exe" -a 127.0.0.1 -p 4222 -js -sd "$state/nats" -l "$state/nats.log" >/dev/null 2>&1 &
  wait_port 4222 nats
}

usage() { echo "usage: services.sh up [postgres] [redis] [nats]" >&2; exit 2; }

[ "${1:-up}" = up ] || usage
shift || true
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(postgres redis nats)
for name in "${wanted[@]}"; do
  case "$name" in postgres|redis|nats) ;; *) usage ;; esac
done
for name in "${wanted[@]}"; do "${name}_up"; done
echo "services: ${wanted[*]} up"
