#!/usr/bin/env bash
# Measures, on this machine, the settings that decide Chorus's speed and
# prints the recommended ones as a TOML snippet, with the numbers behind
# each recommendation (docs/tuning.md explains every knob).
#
#   bench/tune.sh [--build DIR] [--ranks N] [--transport tcp|shm] [--rounds R]
#                 [--iters N] [--max SIZE] [--quick] [--out DIR]
#                 [--phases "algo oneshot ring"]
#   bench/tune.sh --report DIR/tune.jsonl [--ranks N] [--transport T]   # re-print only
#
# Phases (each one varies one thing against the current defaults, all runs
# pinned so that `auto` does not hide what was measured):
#   algo     ring against mesh for all_reduce, all_gather and reduce_scatter,
#            8 B .. --max in x4 steps: where auto should switch.
#   oneshot  mesh all_reduce with one shot forced (one_shot_max=1G) against
#            reduce-scatter + all-gather (one_shot_max=0), 8 B .. 4 MiB: the
#            value of algorithm.mesh.one_shot_max.
#   wait     mesh all_reduce 16 B .. 1 MiB with the transport's spin_us at
#            0 (sleep at once), its default and 300: how long wait() should
#            poll before it sleeps (opt-in: --phases "... wait").
#   ring     ring all_reduce from 1 MiB to --max with algorithm.channels in
#            {1,2,4}, algorithm.staging_slot_size in {256K,1M,4M}, and for
#            the tcp transport transport.tcp.sockets in {1,2,4} and
#            transport.tcp.rcvbuf in {0 (autotuning), 4M}.
#
# Method: chorus-bench (median of --iters timed calls after a barrier each,
# slowest rank), every variant of a phase run once per round, the variants in
# a rotated order each round; the median over rounds counts. A knob moves
# away from its default only if the alternative is faster by at least 10 %
# (geometric mean of the per-size speed-ups) AND faster at a majority of the
# sizes: on a shared 2-core machine smaller differences are noise.
# Raw JSON lines stay in DIR/tune.jsonl (default: BUILD/tune).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build"
ranks=4
transport=tcp
rounds=3
iters=5
max=64M
out=""
phases="algo oneshot ring"
report=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(realpath -m "$2"); shift ;;
    --ranks) ranks="$2"; shift ;;
    --transport) transport="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --iters) iters="$2"; shift ;;
    --max) max="$2"; shift ;;
    --out) out=$(realpath -m "$2"); shift ;;
    --phases) phases="$2"; shift ;;
    --quick) rounds=1; iters=3; max=16M ;;
    --report) report=$(realpath "$2"); shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "tune.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
bin="$build/bin"
if [ -n "$report" ]; then
  results=$report
else
for exe in chorus-bench chorusrun; do
  [ -x "$bin/$exe" ] || { echo "tune.sh: $bin/$exe not found; build first (scripts/build.sh) or pass --build DIR" >&2; exit 1; }
done
[ -n "$out" ] || out="$build/tune"
mkdir -p "$out"
results="$out/tune.jsonl"
: >"$results"
start=$(date +%s)

# run PHASE VARIANT COLL ALGO SIZES... -- ENV...: one chorus-bench sweep,
# its JSON lines tagged with phase and variant.
run() {
  local phase=$1 variant=$2 coll=$3 algo=$4 b=$5 e=$6
  shift 6
  printf 'tune.sh: round %d/%d %-8s %-14s %-22s (%ds)\n' "$round" "$rounds" "$phase" "$coll" \
    "$variant" $(( $(date +%s) - start )) >&2
  local lines
  if ! lines=$(env CHORUS_TRANSPORT="$transport" "$@" timeout 900 "$bin/chorusrun" -n "$ranks" \
      --timeout 850 -- "$bin/chorus-bench" --coll "$coll" -a "$algo" -b "$b" -e "$e" -f 4 \
      -n "$iters" -w 1 -c --json 2>"$out/last-run.log"); then
    echo "tune.sh: $phase $variant $coll failed; last lines of its log:" >&2
    tail -5 "$out/last-run.log" >&2
    return 1
  fi
  grep -o '{"coll".*}' <<<"$lines" |
    sed "s/^{/{\"phase\":\"$phase\",\"variant\":\"$variant\",\"round\":$round,/" >>"$results"
}

# rotate N: prints 0..N-1 starting at (round-1) mod N
rotate() { local n=$1 k=$(( (round - 1) % $1 )) i; for ((i = 0; i < n; i++)); do echo $(( (i + k) % n )); done; }

# "control" is the default run a second time: how far two identical runs
# disagree is this machine's noise, and a knob must beat it to count.
ring_variants=("default|" "control|" "channels=2|CHORUS_ALGORITHM_CHANNELS=2" "channels=4|CHORUS_ALGORITHM_CHANNELS=4"
  "staging_slot_size=256K|CHORUS_ALGORITHM_STAGING_SLOT_SIZE=256K"
  "staging_slot_size=4M|CHORUS_ALGORITHM_STAGING_SLOT_SIZE=4M")
if [ "$transport" = tcp ]; then
  ring_variants+=("tcp.sockets=2|CHORUS_TRANSPORT_TCP_SOCKETS=2" "tcp.sockets=4|CHORUS_TRANSPORT_TCP_SOCKETS=4"
    "tcp.rcvbuf=0|CHORUS_TRANSPORT_TCP_RCVBUF=0" "tcp.rcvbuf=4M|CHORUS_TRANSPORT_TCP_RCVBUF=4M")
fi

for ((round = 1; round <= rounds; round++)); do
  for phase in $phases; do
    case "$phase" in
      algo)
        for coll in all_reduce all_gather reduce_scatter; do
          algos=(ring mesh)
          for i in $(rotate 2); do run algo "${algos[i]}" "$coll" "${algos[i]}" 16 "$max"; done
        done ;;
      oneshot)
        v=("one_shot|CHORUS_ALGORITHM_MESH_ONE_SHOT_MAX=1G" "two_shot|CHORUS_ALGORITHM_MESH_ONE_SHOT_MAX=0")
        for i in $(rotate 2); do
          run oneshot "${v[i]%%|*}" all_reduce mesh 16 4M ${v[i]#*|}
        done ;;
      wait)
        var="CHORUS_TRANSPORT_$(tr '[:lower:]' '[:upper:]' <<<"$transport")_SPIN_US"
        v=("spin_us=default|" "spin_us=0|$var=0" "spin_us=300|$var=300")
        for i in $(rotate 3); do
          run wait "${v[i]%%|*}" all_reduce mesh 16 1M ${v[i]#*|}
        done ;;
      ring)
        for i in $(rotate ${#ring_variants[@]}); do
          spec=${ring_variants[i]}
          run ring "${spec%%|*}" all_reduce ring 1M "$max" ${spec#*|}
        done ;;
      *) echo "tune.sh: unknown phase $phase" >&2; exit 2 ;;
    esac
  done
done
fi

/usr/bin/python3 - "$results" "$transport" "$ranks" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import collections, json, math, statistics, sys

path, transport, ranks, load = sys.argv[1:5]
rows = [json.loads(l) for l in open(path)]
wrong = sum(r["wrong"] for r in rows)
t = collections.defaultdict(list)
for r in rows:
    t[(r["phase"], r["variant"], r["coll"], r["bytes"])].append(r["time_us"])
med = {k: statistics.median(v) for k, v in t.items()}

def size(b):
    for unit, s in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{unit}"
    return str(b)

def sizes(phase, variant, coll):
    return sorted(b for (p, v, c, b) in med if (p, v, c) == (phase, variant, coll) and b > 0)

noise = 1.10  # raised to the control run's disagreement with the default below


def geo(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 1.0


def verdict(speedups):
    """Clear beyond the noise: a geometric-mean gain above both 10 % and the
    control run's own deviation, and faster at most sizes."""
    if not speedups:
        return False, 1.0
    g = geo(speedups)
    return g >= noise and sum(s > 1 for s in speedups) * 2 > len(speedups), g

print(f"# bench/tune.sh: transport {transport}, {ranks} ranks, load average {load}, "
      f"{len(rows)} measurements, {wrong} wrong elements")
toml = {}
notes = []

# ---- algo: where ring overtakes mesh --------------------------------------
switch = {}
for coll in ("all_reduce", "all_gather", "reduce_scatter"):
    bs = sizes("algo", "ring", coll)
    if not bs:
        continue
    print(f"\n## {coll}: ring against mesh (median µs; speed = ring time / mesh time, above 1 mesh is faster)")
    print("| size | ring µs | mesh µs | mesh speed |\n|---:|---:|---:|---:|")
    faster = {}
    for b in bs:
        r, m = med.get(("algo", "ring", coll, b)), med.get(("algo", "mesh", coll, b))
        if r is None or m is None:
            continue
        faster[b] = r / m
        print(f"| {size(b)} | {r:.0f} | {m:.0f} | {r / m:.2f} |")
    # Switch at the smallest size from which ring is faster at every larger
    # size measured (a single noisy size cannot move it far).
    sw = None
    for b in sorted(faster):
        if all(faster[x] <= 1.0 for x in faster if x >= b):
            sw = b
            break
    # chorus-bench sizes all_gather / reduce_scatter by the gathered buffer;
    # the switch applies to the bytes per rank.
    per_rank = 1 if coll == "all_reduce" else int(ranks)
    switch[coll] = None if sw is None else sw // per_rank
    print(f"ring from {size(sw) if sw else 'never (mesh fastest everywhere)'}"
          + (f" ({size(sw // per_rank)} per rank)" if sw and per_rank > 1 else ""))

# ---- oneshot --------------------------------------------------------------
bs = sizes("oneshot", "one_shot", "all_reduce")
if bs:
    print("\n## mesh all_reduce: one shot against reduce-scatter + all-gather (median µs)")
    print("| size | one shot µs | two shot µs | one-shot speed |\n|---:|---:|---:|---:|")
    best, last_one_shot_win = 0, 0
    shot = {}
    for b in bs:
        o, w = med.get(("oneshot", "one_shot", "all_reduce", b)), med.get(("oneshot", "two_shot", "all_reduce", b))
        if o is None or w is None:
            continue
        shot[b] = w / o
        print(f"| {size(b)} | {o:.0f} | {w:.0f} | {w / o:.2f} |")
    # One shot up to the size before the point from which two shot is faster
    # at every larger size.
    for b in sorted(shot):
        if all(shot[x] < 1.0 for x in shot if x >= b):
            break
        best = b
    if best != 64 << 10:
        toml["algorithm.mesh.one_shot_max"] = f'"{size(best)}"' if best else "0"
    notes.append(f"one_shot_max: largest size up to which one shot was never slower: {size(best) if best else 'none'}")

# ---- ring knobs -----------------------------------------------------------
variants = sorted({v for (p, v, c, b) in med if p == "ring"})
if "default" in variants:
    bs = sizes("ring", "default", "all_reduce")
    print("\n## ring all_reduce knobs (median µs; speed-up = default time / variant time)")
    print("| variant | " + " | ".join(size(b) for b in bs) + " | geomean speed-up |")
    print("|---|" + "---:|" * (len(bs) + 1))
    print("| default | " + " | ".join(f"{med[('ring', 'default', 'all_reduce', b)]:.0f}" for b in bs) + " | 1.00 |")
    gains = {}
    if "control" in variants:
        ctl = [med[("ring", "default", "all_reduce", b)] / med[("ring", "control", "all_reduce", b)]
               for b in bs if ("ring", "control", "all_reduce", b) in med]
        noise = max(noise, geo(ctl), 1 / geo(ctl))
        notes.append(f"noise: the control run (the defaults again) was {geo(ctl):.2f}x the default run; "
                     f"a knob must gain {noise:.2f}x to count")
    for v in variants:
        if v == "default":
            continue
        sp = [med[("ring", "default", "all_reduce", b)] / med[("ring", v, "all_reduce", b)]
              for b in bs if ("ring", v, "all_reduce", b) in med]
        clear, g = verdict(sp)
        if v != "control":
            gains[v] = (clear, g)
        print(f"| {v} | " + " | ".join(f"{med[('ring', v, 'all_reduce', b)]:.0f}" if ("ring", v, "all_reduce", b) in med else "-" for b in bs)
              + f" | {g:.2f}{' (clear)' if clear else ''} |")
    for knob, key, quote in (("channels", "algorithm.channels", False),
                             ("staging_slot_size", "algorithm.staging_slot_size", True),
                             ("tcp.sockets", "transport.tcp.sockets", False),
                             ("tcp.rcvbuf", "transport.tcp.rcvbuf", True)):
        cands = [(g, v) for v, (clear, g) in gains.items() if v.startswith(knob + "=") and clear]
        if cands:
            g, v = max(cands)
            val = v.split("=", 1)[1]
            toml[key] = f'"{val}"' if quote and not val.isdigit() else val
            notes.append(f"{key}: {val} is {g:.2f}x the default")
        else:
            notes.append(f"{key}: no value clearly beats the current default")

# ---- wait: spin_us --------------------------------------------------------
bs = sizes("wait", "spin_us=default", "all_reduce")
if bs:
    print(f"\n## wait: transport.{transport}.spin_us (mesh all_reduce, median µs; speed-up = default time / variant time)")
    print("| variant | " + " | ".join(size(b) for b in bs) + " | geomean speed-up |")
    print("|---|" + "---:|" * (len(bs) + 1))
    base = {b: med[("wait", "spin_us=default", "all_reduce", b)] for b in bs}
    print("| default | " + " | ".join(f"{base[b]:.0f}" for b in bs) + " | 1.00 |")
    best = None
    for v in ("spin_us=0", "spin_us=300"):
        got = {b: med[("wait", v, "all_reduce", b)] for b in bs if ("wait", v, "all_reduce", b) in med}
        if not got:
            continue
        clear, g = verdict([base[b] / got[b] for b in got])
        print(f"| {v} | " + " | ".join(f"{got[b]:.0f}" if b in got else "-" for b in bs)
              + f" | {g:.2f}{' (clear)' if clear else ''} |")
        if clear and (best is None or g > best[0]):
            best = (g, v.split("=", 1)[1])
    if best:
        toml[f"transport.{transport}.spin_us"] = best[1]
        notes.append(f"transport.{transport}.spin_us: {best[1]} is {best[0]:.2f}x the default")
    else:
        notes.append(f"transport.{transport}.spin_us: no value clearly beats the current default")

for coll, sw in switch.items():
    notes.append(f"{coll}: ring from {size(sw) + ' per rank' if sw else 'never'} (built-in switch: "
                 + ("64K" if coll == "all_reduce" else "1M") + " per rank, mesh up to and including it)")
vals = {v for v in switch.values() if v}
if len(vals) == 1:
    toml["algorithm.switch_bytes"] = f'"{size(vals.pop())}"'

print("\n## Findings")
for n in notes:
    print(f"- {n}")
print("\n## Recommended settings (only values that differ clearly from the defaults)\n")
print("```toml")
tables = collections.defaultdict(list)
for key, value in toml.items():
    table, _, leaf = key.rpartition(".")
    tables[table].append(f"{leaf} = {value}")
for table in sorted(tables):
    print(f"[{table}]")
    print("\n".join(tables[table]))
print("```")
if not toml:
    print("(the defaults are already the best measured)")
PY
