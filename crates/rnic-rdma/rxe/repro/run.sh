#!/usr/bin/env bash
# Builds the rxe deviation reproducers and runs them all in one scripts/rxe-vm VM. Each prints
# `DEVIATION <name> reproduced` (exit 0) or `DEVIATION <name> absent` (exit 1); the run exits 0
# when every deviation reproduced, 1 when one is absent or a program failed (exit 2: its setup
# failed), 77 when skipped. Extra arguments go to scripts/rxe-vm before the programs
# (e.g. --log FILE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
set +e
progs=$("$here/build.sh" "$root/target/rxe-repro")
rc=$?
set -e
[[ $rc -eq 77 ]] && { printf '%s\n' "$progs"; exit 77; }
[[ $rc -eq 0 ]] || exit "$rc"
args=()
for p in $progs; do
  ((${#args[@]} == 0)) || args+=(---)
  args+=("$p")
done
exec "$root/scripts/rxe-vm" --timeout 120 "$@" -- "${args[@]}"
