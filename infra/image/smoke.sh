#!/usr/bin/env bash
# Smoke test of the server image (make image-smoke): migrate into a fresh volume, serve read-only as
# uid 10001, wait for /v1/health 200 and a dashboard asset, then SIGTERM: the process must drain and exit
# within QUEUECORE_DRAIN_SECONDS + QUEUECORE_SHUTDOWN_TIMEOUT_SECONDS. Host networking on $PORT.
# PODMAN_RUN_ARGS are handed to every `podman run` (e.g. a runtime's flags, docs/operations.md).
set -euo pipefail
IMAGE=${IMAGE:-localhost/queuecore-server:dev}
PODMAN=${PODMAN:-podman}
PORT=${PORT:-18931}
read -r -a RUN_ARGS <<< "${PODMAN_RUN_ARGS:-}"
name=qc-smoke-$$
volume=qc-smoke-$$
cleanup() {
  $PODMAN rm -f "$name" >/dev/null 2>&1 || true
  $PODMAN volume rm -f "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT

$PODMAN volume create "$volume" >/dev/null
echo "==> migrate"
$PODMAN run --rm "${RUN_ARGS[@]}" --network=none -v "$volume:/data" "$IMAGE" migrate

echo "==> serve on 127.0.0.1:$PORT"
$PODMAN run -d --name "$name" "${RUN_ARGS[@]}" --network=host --read-only --tmpfs /tmp \
  -e QUEUECORE_HOST=127.0.0.1 -e QUEUECORE_PORT="$PORT" -v "$volume:/data" "$IMAGE" >/dev/null
for _ in $(seq 1 60); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/health" || true)
  [ "$code" = 200 ] && break
  sleep 1
done
if [ "$code" != 200 ]; then
  echo "FAIL: /v1/health answered ${code:-nothing}"; $PODMAN logs "$name" | tail -20; exit 1
fi
curl -s "http://127.0.0.1:$PORT/v1/health"; echo
[ "$($PODMAN exec "$name" id -u)" = 10001 ] || { echo "FAIL: not uid 10001"; exit 1; }
$PODMAN healthcheck run "$name" || { echo "FAIL: the image's HEALTHCHECK"; exit 1; }
asset=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/dashboard/static/vendor/htmx.min.js")
[ "$asset" = 200 ] || { echo "FAIL: dashboard asset answered $asset"; exit 1; }

echo "==> SIGTERM: drain, then exit"
start=$(date +%s)
$PODMAN stop -t 45 "$name" >/dev/null
took=$(( $(date +%s) - start ))
logs=$($PODMAN logs "$name" 2>&1)
grep -q '"drained: stopping"' <<< "$logs" || { echo "FAIL: no drain in the log"; echo "$logs" | tail -20; exit 1; }
[ "$took" -le 35 ] || { echo "FAIL: took ${took}s to stop"; exit 1; }
echo "OK: health 200 as uid 10001, dashboard assets served, drained and stopped in ${took}s"
