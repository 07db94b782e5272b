#!/usr/bin/env bash
# The engine benchmarks of issue #18 (part 7), side by side in one run:
#  1. 16 non-blocking 64 KiB all_reduces posted back to back and then waited,
#     against the same 16 run one at a time, at 4 ranks over shm and tcp,
#     with collectives.lanes 1 and 4, and the same 16 posted inside
#     chorus_group_start/chorus_group_end, fused into one all_reduce
#     (chorus-engine-bench inflight --group; the three modes alternate per
#     iteration);
#  2. an isend/irecv ping-pong at 2 ranks: Chorus over shm and tcp (also
#     with a limited wait, and blocking send/recv), Open MPI over vader and
#     tcp (mpi-pingpong, the same steps).
# Every result is checked on every rank (-c). Prints the JSON lines and a
# summary; numbers go to docs/benchmarks.md by hand, with this command.
#
#   bench/engine.sh [BUILD_DIR] [ITERS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
iters=${2:-30}
bin=$build/bin
cmake --build "$build" -j2 --target chorus-engine-bench chorusrun chorus_transport_tcp \
  chorus_transport_shm mpi-pingpong >/dev/null
mpirun_flags=(--mca pml ob1 --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
json() { grep -o '{"bench".*}' || true; }

echo "# engine.sh: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# With one lane (the default) and with four (collectives.lanes = 4: four
# collectives progress at once, docs/embedding.md "Collectives in flight").
for lanes in 1 4; do
  for tp in shm tcp; do
    CHORUS_COLLECTIVES_LANES=$lanes CHORUS_TRANSPORT=$tp timeout 900 "$bin/chorusrun" -n 4 \
      --timeout 800 -- "$bin/chorus-engine-bench" inflight --bytes 64K -k 16 -n "$iters" -w 3 -c \
      --group |
      json | sed "s/\"transport\": \"$tp\"/\"transport\": \"$tp\", \"lanes\": $lanes/"
  done
done
pp_iters=$((iters * 20))
# Chorus: isend/irecv then wait (the waiter drives its request), the same
# with a limit on the wait (driven until the limit), and blocking send/recv;
# then the tagged calls (chorus_isend_tagged/irecv_tagged, and blocking).
for tp in shm tcp; do
  for how in "" "--wait-ms 600000" "--blocking" "--tagged" "--tagged --blocking"; do
    CHORUS_TRANSPORT=$tp timeout 900 "$bin/chorusrun" -n 2 --timeout 800 -- \
      "$bin/chorus-engine-bench" pingpong -b 8 -e 64K -n "$pp_iters" -w 50 -c $how | json |
      sed "s/\"transport\": \"$tp\"/\"transport\": \"chorus-$tp\"/"
  done
done
for btl in vader tcp; do
  timeout 900 mpirun "${mpirun_flags[@]}" -np 2 --mca btl "$btl,self" \
    "$bin/mpi-pingpong" 8 65536 "$pp_iters" 50 -c | json |
    sed "s/\"transport\": \"mpi\"/\"transport\": \"openmpi-$btl\"/"
done
