#!/usr/bin/env bash
# Configures and builds one configuration.
#   scripts/build.sh            -> build/        (RelWithDebInfo)
#   scripts/build.sh asan       -> build-asan/   (ASan + UBSan)
#   scripts/build.sh tsan       -> build-tsan/   (TSan)
#   scripts/build.sh KIND TARGET...   builds only TARGET... (and what they depend on)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
shift $(($# > 0 ? 1 : 0))
targets=("$@")
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
# Under CI (CHORUS_TEST_REQUIRE=1, scripts/test.sh) every optional part is
# required: a missing library is a configure error, not a part left out.
if [ -n "${CHORUS_TEST_REQUIRE:-}" ]; then flags+=(-DCHORUS_REQUIRE_ALL=ON); fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$dir" -j"$jobs" --target "${targets[@]}"
else
  cmake --build "$dir" -j"$jobs"
fi
