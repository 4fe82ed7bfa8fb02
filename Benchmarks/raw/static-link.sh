#!/usr/bin/env bash
# Makes the benchmarks link protobuf-c and the C++ library (which the Swift runtime uses) from
# their static archives, the C library staying shared. Cairo stays shared too: Pango, which a
# process loads at its first text, draws with the shared libcairo.so.2, and a process with a
# Cairo of its own besides crashes at its first text (CPango refuses that, saying so).
# Writes into DIR a pkg-config file for libprotobuf-c that puts DIR first on the library path,
# and linker scripts named libprotobuf-c.so and libstdc++.so there that name the archives;
# `PKG_CONFIG_PATH=DIR swift build` uses them.
# Where an archive is missing, DIR is emptied and everything links dynamically as before.
# Usage: Benchmarks/raw/static-link.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
libdir=$(pkg-config --variable=libdir libprotobuf-c)
includedir=$(pkg-config --variable=includedir libprotobuf-c)
if [[ ! -f $libdir/libprotobuf-c.a ]]; then
  echo "static-link: $libdir/libprotobuf-c.a is missing: the benchmarks link protobuf-c dynamically" >&2
  rm -f "$dir"/*
  exit 0
fi
# A linker script of an earlier version that linked Cairo from its archives.
rm -f "$dir/libcairo.so"
# Written only when different, so the build sees no change from one run to the next.
write() {
  if ! cmp -s <(printf '%s\n' "$2") "$dir/$1" 2>/dev/null; then printf '%s\n' "$2" >"$dir/$1"; fi
}
# The C++ library: optional (without it, it stays shared).
cxx=$(cc -print-file-name=libstdc++.a 2>/dev/null || true)
if [[ $cxx == /* && -f $cxx ]]; then write libstdc++.so "INPUT ( $cxx )"; else rm -f "$dir/libstdc++.so"; fi
write libprotobuf-c.so "INPUT ( libprotobuf-c.a )"
write libprotobuf-c.pc "Name: protobuf-c
Description: protobuf-c, linked statically (RemoteView benchmarks)
Version: $(pkg-config --modversion libprotobuf-c)
Libs: -L$dir -L$libdir -lprotobuf-c
Cflags: -I$includedir"
