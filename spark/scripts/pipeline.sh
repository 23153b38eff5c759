#!/usr/bin/env bash
# make pipeline: the archive and the usage rollups, once, against the embedded default (./data).
# Uses the server on QUEUECORE_BASE_URL (default http://127.0.0.1:8080) if one answers, else starts one
# for the run. Keys: the demo project's, issued once by 'queuecore-server bootstrap' and kept in
# data/pipeline-keys.json (mode 600; never printed). The usage job calls the operators' admin API: its token
# is $QUEUECORE_ADMIN_TOKEN, else one generated once into data/admin-token (mode 600), which a server this
# script starts is given; a server already running must have been started with the same token.
set -euo pipefail
BIN=${BIN:-.venv/bin}
DATA=${QUEUECORE_DATA_DIR:-data}
URL=${QUEUECORE_BASE_URL:-http://127.0.0.1:8080}
KEYS="$DATA/pipeline-keys.json"
export PYSPARK_PYTHON="$PWD/$BIN/python"

"$BIN/queuecore-server" migrate >/dev/null
if [ ! -s "$KEYS" ]; then
  (umask 077 && "$BIN/queuecore-server" bootstrap --project demo --json > "$KEYS")
fi

if [ -z "${QUEUECORE_ADMIN_TOKEN:-}" ]; then
  if [ ! -s "$DATA/admin-token" ]; then
    (umask 077 && "$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$DATA/admin-token")
  fi
  QUEUECORE_ADMIN_TOKEN=$(cat "$DATA/admin-token")
fi
export QUEUECORE_ADMIN_TOKEN

started=""
if ! curl -fsS "$URL/v1/health" >/dev/null 2>&1; then
  port=${URL##*:}
  "$BIN/queuecore-server" serve --port "$port" > "$DATA/pipeline-server.log" 2>&1 &
  started=$!
  trap 'kill "$started" 2>/dev/null; wait "$started" 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do curl -fsS "$URL/v1/health" >/dev/null 2>&1 && break; sleep 0.2; done
fi

QUEUECORE_BASE_URL="$URL" "$BIN/queuecore-spark" archive --out "$DATA/archive" --keys "$KEYS"
QUEUECORE_BASE_URL="$URL" "$BIN/queuecore-spark" usage
