#!/bin/sh
# The daemon on Soft-RoCE (run by scripts/rxe-suites inside scripts/rxe-vm; $1 is the patronus
# binary): `devices --check` reports the window-bounds deviation (exit 4); `serve` refuses with
# a one-line reason; with --allow-unenforced-window-bounds it serves, says so in /metrics, and
# a `probe` from a second process runs its lifecycle against it.
set -u
P=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$P" devices --check --device rxe0)
code=$?
echo "$out"
[ "$code" -eq 4 ] || fail "devices --check exited $code, expected 4"
echo "$out" | grep -q "window-bounds.*NOT ENFORCED" || fail "no window-bounds finding"
echo "$out" | grep -q "old-rkey-after-rebind *enforced" || fail "old rkey not refused"
echo "$out" | grep -q "read-only-window *enforced" || fail "read-only window not enforced"

SERVE="serve --provider rdma --device rxe0 --listen 127.0.0.1:7700 --pool-mib 64"
# shellcheck disable=SC2086 # $SERVE is a list of words
err=$("$P" $SERVE 2>&1 >/dev/null)
code=$?
echo "$err"
[ "$code" -ne 0 ] || fail "serve did not refuse"
[ "$(echo "$err" | grep -c .)" -eq 1 ] || fail "the refusal is not one line"
echo "$err" | grep -q "window-bounds" || fail "the refusal does not name the check"

mkfifo serve.out
# shellcheck disable=SC2086
"$P" $SERVE --admin 127.0.0.1:7701 --allow-unenforced-window-bounds >serve.out 2>&1 &
pid=$!
exec 3<serve.out
ready=
while IFS= read -r line <&3; do
  echo "serve: $line"
  case $line in admin*) ready=1; break ;; esac
done
[ -n "$ready" ] || fail "serve ended before it listened"
cat <&3 | sed 's/^/serve: /' &

"$P" probe --provider rdma --device rxe0 --connect 127.0.0.1:7700 || fail "probe failed"
metrics=$(wget -q -O- http://127.0.0.1:7701/metrics) || fail "no /metrics"
echo "$metrics" | grep -q "^patronus_unenforced_window_bounds 1" || fail "/metrics does not say it"
status=$(wget -q -O- http://127.0.0.1:7701/status) || fail "no /status"
echo "$status" | grep -q '"unenforced_window_bounds":true' || fail "/status does not say it"
kill -TERM "$pid"
wait "$pid" || fail "serve exited $? after SIGTERM"
echo "serve and probe on rxe0: ok"
