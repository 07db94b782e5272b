#!/usr/bin/env bash
# Configures and builds one configuration.
#   scripts/build.sh            -> build/        (RelWithDebInfo)
#   scripts/build.sh asan       -> build-asan/   (ASan + UBSan)
#   scripts/build.sh tsan       -> build-tsan/   (TSan)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
jobs="${JOBS:-2}"
case "$kind" in
  release) dir=build; flags=() ;;
  asan) dir=build-asan
        flags=(-DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
               -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined") ;;
  tsan) dir=build-tsan
        flags=(-DCMAKE_C_FLAGS="-fsanitize=thread" -DCMAKE_CXX_FLAGS="-fsanitize=thread") ;;
  *) echo "usage: $0 [release|asan|tsan]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$jobs"
