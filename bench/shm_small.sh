#!/usr/bin/env bash
# Small-message shm comparison, side by side in one run: Chorus over shm
# (this build, and optionally an older build) and Open MPI with the vader
# BTL, for all_reduce, all_gather and reduce_scatter (float32 sum), 8 B to
# 16 KiB. For each (ranks, collective) the systems run one after another, and
# the whole sweep is repeated --rounds times with the order rotated, so load
# from other work hits every system alike. Prints one line per (system,
# ranks, collective, size) with the median over the rounds of each run's
# median time (us), then the ratio table chorus/vader.
#
#   bench/shm_small.sh [--build DIR] [--old DIR] [--ranks "2 4"] [--rounds N]
#                      [--colls "..."] [--sizes "8 1024 16384"] [--iters N] [--pin]
#
# --pin: rank r runs on CPU r mod nproc (taskset for Chorus, --bind-to core
# for Open MPI), so that the scheduler cannot put two ranks on one CPU while
# others are free; without it nothing is bound (as in bench/compare.sh).
# --old DIR: the bin directory of another build (e.g. /work/main/build/bin)
# whose chorus-bench and plugins run as system "chorus-shm-old".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build"
old=""
ranks="2 4"
rounds=3
colls="all_reduce all_gather reduce_scatter"
sizes="8 1024 16384"
iters=2000
pin=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(realpath -m "$2"); shift ;;
    --old) old=$(realpath -m "$2"); shift ;;
    --ranks) ranks="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --colls) colls="$2"; shift ;;
    --sizes) sizes="$2"; shift ;;
    --iters) iters="$2"; shift ;;
    --pin) pin=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "shm_small.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
bin="$build/bin"
cores=$(nproc)
mpirun_flags=(--mca pml ob1)
bind=none
pinner=()
if [ "$pin" = 1 ]; then
  bind=core
  pinner=(sh -c 'exec taskset -c $((CHORUS_RANK % $(nproc))) "$@"' pin)
fi
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
out=$(mktemp -d "${TMPDIR:-/tmp}/shm_small.XXXXXX")
results="$out/results.txt"
: >"$results"

systems=(chorus-shm mpi-vader)
[ -n "$old" ] && systems=(chorus-shm-old chorus-shm mpi-vader)

# run SYSTEM N COLL SIZE: appends "system n coll bytes time_us" lines.
run() {
  local system=$1 n=$2 coll=$3 size=$4 lines
  # all_gather and reduce_scatter need a whole float per rank: 8 B -> 16 B at 4 ranks.
  [ "$coll" = all_reduce ] || size=$(( (size + 4 * n - 1) / (4 * n) * 4 * n ))
  local args=(--coll "$coll" -b "$size" -e "$size" -n "$iters" -w $((iters / 10 + 1)))
  case "$system" in
    chorus-shm)
      lines=$(CHORUS_TRANSPORT=shm timeout 600 "$bin/chorusrun" -n "$n" --timeout 550 -- \
        "${pinner[@]}" "$bin/chorus-bench" "${args[@]}" --no-inplace --json 2>"$out/log") ;;
    chorus-shm-old)
      lines=$(CHORUS_TRANSPORT=shm timeout 600 "$old/chorusrun" -n "$n" --timeout 550 -- \
        "${pinner[@]}" "$old/chorus-bench" "${args[@]}" --no-inplace --json 2>"$out/log") ;;
    mpi-vader)
      local over=()
      local b=$bind
      if [ "$n" -gt "$cores" ]; then
        over=(--oversubscribe)
        [ "$b" = core ] && b=core:overload-allowed
      fi
      over+=(--bind-to "$b")
      lines=$(timeout 600 mpirun "${mpirun_flags[@]}" "${over[@]}" -np "$n" --mca btl vader,self \
        "$bin/mpi-bench" "${args[@]}" --label vader 2>"$out/log") ;;
  esac
  grep -o '"bytes":[0-9]*,.*"time_us":[0-9.]*' <<<"$lines" | head -1 |
    sed -E 's/"bytes":([0-9]+),.*"time_us":([0-9.]+)/\1 \2/' |
    while read -r b t; do echo "$system $n $coll $b $t" >>"$results"; done
}

for ((round = 1; round <= rounds; round++)); do
  for n in $ranks; do
    for coll in $colls; do
      for size in $sizes; do
        k=$(( (round - 1) % ${#systems[@]} ))
        order=("${systems[@]:k}" "${systems[@]:0:k}")
        for system in "${order[@]}"; do run "$system" "$n" "$coll" "$size"; done
      done
    done
  done
  echo "shm_small.sh: round $round/$rounds done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

/usr/bin/python3 - "$results" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    system, n, coll, size, t = line.split()
    runs[(system, int(n), coll, int(size))].append(float(t))
med = {k: statistics.median(v) for k, v in runs.items()}
systems = sorted({k[0] for k in med})
keys = sorted({k[1:] for k in med})
print("ranks coll            bytes  " + "  ".join(f"{s:>15}" for s in systems) + "   shm/vader")
for n, coll, size in keys:
    row = [med.get((s, n, coll, size)) for s in systems]
    v, c = med.get(("mpi-vader", n, coll, size)), med.get(("chorus-shm", n, coll, size))
    ratio = f"{c / v:9.2f}" if v and c else "      n/a"
    print(f"{n:5} {coll:15} {size:6}  " +
          "  ".join(f"{x:15.3f}" if x is not None else f"{'n/a':>15}" for x in row) + "   " + ratio)
print(f"(median over {max(len(v) for v in runs.values())} rounds of each run's median, us; "
      f"raw lines in {sys.argv[1]})")
EOF
