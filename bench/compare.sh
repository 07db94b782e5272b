#!/usr/bin/env bash
# Compares Chorus (tcp and shm transports) with Open MPI (TCP and vader
# shared-memory BTLs) and Gloo (TCP) on this machine: float32 sum
# all_reduce, all_gather and reduce_scatter, 2 and 4 ranks, 8 B .. 64 MiB.
#
#   bench/compare.sh [--quick] [--build DIR] [--ranks "2 4"] [--rounds N]
#                    [--colls "all_reduce all_gather reduce_scatter"]
#                    [--out DIR] [--no-docs]
#
# Every program uses chorus-bench's methodology (barrier, timed op, slowest
# rank's time, median over iterations, every element checked; see
# bench/bench_driver.h). For each (collective, rank count) the systems run one
# after another, and the whole sweep is repeated --rounds times with the
# order rotated, so a noisy neighbour hits every system alike; per size the
# best round counts. Results go to DIR/compare.jsonl; bench/report.py prints
# the chorus/peer ratio table, draws docs/benchmarks-compare.png and rewrites
# the "Chorus vs Open MPI and Gloo" section of docs/benchmarks.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-shm"
invocation="bench/compare.sh $*"
ranks="2 4"
colls="all_reduce all_gather reduce_scatter"
rounds=2
quick=0
docs=1
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --build) build=$(realpath -m "$2"); shift ;;
    --ranks) ranks="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --colls) colls="$2"; shift ;;
    --out) out=$(realpath -m "$2"); shift ;;
    --no-docs) docs=0 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || out="$build/compare"
mkdir -p "$out"

if [ "$quick" = 1 ]; then
  sizes=(-b 8 -e 64M -f 8)   # 8 B, 64 B, ... 16 MiB: 8 sizes
  iters=(-n 5 -w 2)
  [ "$rounds" = 2 ] && rounds=1
else
  sizes=(-b 8 -e 64M -f 2)
  iters=(-n 20 -w 5)
fi

# ---- build -------------------------------------------------------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j2 --target chorus-bench chorusrun chorus_transport_tcp \
  chorus_transport_shm chorus_algorithm_mesh mpi-bench gloo-bench >/dev/null 2>&1 ||
  cmake --build "$build" -j2 --target chorus-bench chorusrun chorus_transport_tcp \
    chorus_transport_shm mpi-bench gloo-bench
bin="$build/bin"
for exe in chorus-bench chorusrun mpi-bench gloo-bench; do
  [ -x "$bin/$exe" ] || { echo "compare.sh: $bin/$exe was not built (missing libopenmpi-dev or libgloo-dev? see scripts/install-deps.sh)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "compare.sh: mpirun not found (openmpi-bin)" >&2; exit 1; }

# ob1 so that --mca btl picks the transport; no binding (the other programs
# are not bound either). --oversubscribe only when there are more ranks than
# cores: it also turns on mpi_yield_when_idle, while with a core per rank
# Open MPI busy-polls, as it does by default.
cores=$(nproc)
mpirun_flags=(--mca pml ob1 --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)

oversub() { [ "$1" -gt "$cores" ] && echo --oversubscribe || true; }

# ---- one run of one system -------------------------------------------------------
# run_system SYSTEM N COLL: appends its JSON lines, tagged with the system, to the results.
results="$out/compare.jsonl"
: >"$results"
run_system() {
  local system=$1 n=$2 coll=$3 log="$out/last-run.log"
  local args=(--coll "$coll" "${sizes[@]}" "${iters[@]}" -c)
  local lines rc=0
  case "$system" in
    chorus-tcp|chorus-shm)
      lines=$(CHORUS_TRANSPORT=${system#chorus-} timeout 1200 "$bin/chorusrun" -n "$n" --timeout 1100 -- \
        "$bin/chorus-bench" "${args[@]}" --json 2>"$log") || rc=$? ;;
    mpi-tcp)
      lines=$(timeout 1200 mpirun "${mpirun_flags[@]}" $(oversub "$n") -np "$n" --mca btl tcp,self \
        --mca btl_tcp_if_include lo "$bin/mpi-bench" "${args[@]}" --label tcp 2>"$log") || rc=$? ;;
    mpi-vader)
      lines=$(timeout 1200 mpirun "${mpirun_flags[@]}" $(oversub "$n") -np "$n" --mca btl vader,self \
        "$bin/mpi-bench" "${args[@]}" --label vader 2>"$log") || rc=$? ;;
    gloo-tcp)
      local store
      store=$(mktemp -d "${TMPDIR:-/tmp}/gloo-bench.XXXXXX")
      lines=$(GLOO_BENCH_STORE=$store timeout 1200 "$bin/chorusrun" -n "$n" --timeout 1100 -- \
        "$bin/gloo-bench" "${args[@]}" --label tcp 2>"$log") || rc=$?
      rm -rf "$store" ;;
  esac
  if [ "$rc" != 0 ]; then
    echo "compare.sh: $system with $n ranks, $coll failed (exit $rc); last lines of its log:" >&2
    tail -5 "$log" >&2
    # A peer that finished but returned wrong elements keeps its lines, with
    # their "wrong" counts: report.py leaves those sizes out of the peer's
    # results and reports the count (Gloo's halving-doubling reduce_scatter
    # does this now and then, docs/benchmarks.md). Anything else, and any
    # failure of Chorus, fails the comparison.
    if [[ "$system" == chorus-* ]] || ! grep -q '"wrong":[1-9]' <<<"$lines"; then
      return 1
    fi
  fi
  # chorusrun prefixes rank output; keep only the JSON objects.
  grep -o '{"coll".*}' <<<"$lines" | sed "s/^{/{\"system\":\"$system\",\"round\":$round,/" >>"$results"
}

systems=(chorus-tcp chorus-shm mpi-tcp mpi-vader gloo-tcp)
start=$(date +%s)
failed=0
for ((round = 1; round <= rounds; round++)); do
  for n in $ranks; do
    for coll in $colls; do
      # Rotate the order each round so no system always runs first.
      k=$(( (round - 1) % ${#systems[@]} ))
      order=("${systems[@]:k}" "${systems[@]:0:k}")
      for system in "${order[@]}"; do
        printf 'compare.sh: round %d/%d, %d ranks, %-14s %-11s (%ds)\n' \
          "$round" "$rounds" "$n" "$coll" "$system" $(( $(date +%s) - start )) >&2
        run_system "$system" "$n" "$coll" || failed=1
      done
    done
  done
done

report_args=("$results" --load "$(cut -d' ' -f1-3 /proc/loadavg)" --command "$invocation")
if [ "$docs" = 1 ]; then
  report_args+=(--plot "$root/docs/benchmarks-compare.png" --markdown "$root/docs/benchmarks.md")
else
  report_args+=(--plot "$out/compare.png")
fi
/usr/bin/python3 "$here/report.py" "${report_args[@]}"
exit $failed
