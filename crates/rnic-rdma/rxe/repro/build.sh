#!/usr/bin/env bash
# Builds the rxe deviation reproducers (docs/rdma.md, "rxe deviations") on the host, for
# scripts/rxe-vm to run in its VM:
#
#   crates/rnic-rdma/rxe/repro/build.sh [OUTDIR]        (default: target/rxe-repro)
#   scripts/rxe-vm -- OUTDIR/no-qp-error-event --- OUTDIR/dereg-bound-mr-einval ...
#
# Prints the built programs' paths, one a line. Needs gcc and libibverbs' headers and library.
# The host need not have libibverbs-dev installed: when /usr/include/infiniband/verbs.h is
# missing, the libibverbs-dev (and, if needed, libibverbs1) packages are fetched with
# `apt-get download` and unpacked into the rxe-vm cache, nothing installed. It links against
# the cache's libibverbs.so.1 (the one scripts/rxe-vm puts in the guest) when there is one.
# Exit: 0 built; 2 a build failure; 77 skipped (no gcc, no apt-get to fetch the headers).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
out=${1:-$root/target/rxe-repro}
cache=${PATRONUS_RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/patronus-rxe-vm}
dev=$cache/ibverbs-dev
libdir=x86_64-linux-gnu

say() { printf 'repro build: %s\n' "$*" >&2; }
skip() {
  printf 'SKIPPED: %s\n' "$*"
  exit 77
}

command -v gcc >/dev/null || skip "no gcc"

fetch() { # PKG...: download and unpack into $dev (apt-get download needs no root)
  command -v apt-get >/dev/null || skip "no libibverbs headers and no apt-get to fetch them"
  local tmp deb
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/ibverbs-dev.XXXXXX")
  if ! (cd "$tmp" && apt-get download -q "$@") >"$tmp/log" 2>&1; then
    if [[ $EUID -eq 0 ]] && apt-get update -qq >/dev/null 2>&1 &&
      (cd "$tmp" && apt-get download -q "$@") >"$tmp/log" 2>&1; then
      :
    else
      tail -n 5 "$tmp/log" >&2
      rm -rf "$tmp"
      skip "apt-get download $* failed"
    fi
  fi
  mkdir -p "$dev"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$dev"; done
  rm -rf "$tmp"
}

# Headers.
if [[ -f /usr/include/infiniband/verbs.h ]]; then
  include=/usr/include
else
  [[ -f $dev/usr/include/infiniband/verbs.h ]] || {
    say "fetching libibverbs-dev's headers into $dev"
    fetch libibverbs-dev
  }
  include=$dev/usr/include
fi

# The library to link against: the rxe-vm cache's, the host's, or a fetched one.
lib=
for cand in "$cache/rdma-core/usr/lib/$libdir/libibverbs.so.1" "/usr/lib/$libdir/libibverbs.so.1" \
  "$dev/usr/lib/$libdir/libibverbs.so.1"; do
  if [[ -e $cand ]]; then
    lib=$cand
    break
  fi
done
if [[ -z $lib ]]; then
  say "fetching libibverbs1 into $dev"
  fetch libibverbs1
  lib=$dev/usr/lib/$libdir/libibverbs.so.1
fi

mkdir -p "$out"
status=0
for src in "$here"/*.c; do
  name=$(basename "$src" .c)
  name=${name//_/-}
  if gcc -std=gnu11 -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -Wno-unused-function -I"$include" \
    -o "$out/$name" "$src" "$lib"; then
    printf '%s\n' "$out/$name"
  else
    say "error: $src did not build"
    status=2
  fi
done
exit "$status"
