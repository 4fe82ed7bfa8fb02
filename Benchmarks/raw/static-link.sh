#!/usr/bin/env bash
# Makes the benchmarks link Cairo (with everything it needs), protobuf-c and the C++ library
# (which the Swift runtime uses) from their static archives, the C library staying shared: a
# service then maps 4 libraries at start instead of 25, the largest part of its cold start.
# Writes into DIR a pkg-config file for libprotobuf-c that puts DIR first on the library path,
# and linker scripts named libcairo.so, libprotobuf-c.so and libstdc++.so there that name the
# archives; `PKG_CONFIG_PATH=DIR swift build` uses them.
# Where an archive is missing, DIR is emptied and everything links dynamically as before.
# Usage: Benchmarks/raw/static-link.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
libdir=$(pkg-config --variable=libdir cairo)
includedir=$(pkg-config --variable=includedir libprotobuf-c)
archives=(libcairo.a)
for flag in $(pkg-config --static --libs-only-l cairo); do
  case $flag in -lm|-lpthread|-ldl|-lrt|-lc|-lcairo) continue ;; esac
  archive="lib${flag#-l}.a"
  [[ " ${archives[*]} " == *" $archive "* ]] || archives+=("$archive")
done
for archive in "${archives[@]}" libprotobuf-c.a; do
  if [[ ! -f $libdir/$archive ]]; then
    echo "static-link: $libdir/$archive is missing: the benchmarks link Cairo dynamically" >&2
    rm -f "$dir"/*
    exit 0
  fi
done
# Written only when different, so the build sees no change from one run to the next.
write() {
  if ! cmp -s <(printf '%s\n' "$2") "$dir/$1" 2>/dev/null; then printf '%s\n' "$2" >"$dir/$1"; fi
}
# The C++ library: optional (without it, it stays shared).
cxx=$(cc -print-file-name=libstdc++.a 2>/dev/null || true)
if [[ $cxx == /* && -f $cxx ]]; then write libstdc++.so "INPUT ( $cxx )"; else rm -f "$dir/libstdc++.so"; fi
write libcairo.so "GROUP ( ${archives[*]} )"
write libprotobuf-c.so "INPUT ( libprotobuf-c.a )"
write libprotobuf-c.pc "Name: protobuf-c
Description: protobuf-c, linked statically (RemoteView benchmarks)
Version: $(pkg-config --modversion libprotobuf-c)
Libs: -L$dir -L$libdir -lprotobuf-c
Cflags: -I$includedir"
