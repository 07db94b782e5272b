# shellcheck shell=bash disable=SC2154
# script_lib.sh — sourced by the collective test scripts (mesh_settings.sh,
# ring_settings.sh, hd_plugin.sh, v2_plugin.sh). It owns what they share: a
# scratch directory, the ok/bad tally and the final verdict, the wrapper that
# makes every rank print its own exit status, the check that a setting fails
# init on all 4 ranks with a given message, and the check that a bench run
# reports 0 wrong elements (and ran a given algorithm) on every rank.
#
# The sourcing script sets `run` (chorusrun) and `bench` (chorus-bench)
# first, and may set `init_env` (an array: what every init-failure run starts
# with, e.g. env CHORUS_TRANSPORT=tcp) and `init_coll` (the collective those
# runs call; all_reduce by default).

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
finish() {
  echo "$fails failure(s)"
  [ "$fails" = 0 ]
}

# Each rank runs the bench through this wrapper and exits 0 with its own
# status printed: chorusrun stops the other ranks once one fails, and the
# failure cases must hear from all four.
# shellcheck disable=SC2016
wrap='"$@"; echo "bench exited $?"'

init_env=(env)
init_coll=all_reduce

# expect_init_failure TEXT ENV... — a 4-rank run with ENV added fails on every
# rank, and every rank's output says TEXT (a fixed string).
expect_init_failure() {
  local text="$1"
  shift
  "${init_env[@]}" "$@" "$run" -n 4 --timeout 120 -- \
    sh -c "$wrap" rank "$bench" --coll "$init_coll" -b 64 -e 64 -n 1 -w 0 >"$tmp/init" 2>&1
  if [ "$(grep -c "bench exited 0" "$tmp/init")" != 0 ]; then
    bad "$* was accepted"
    tail -8 "$tmp/init"
    return
  fi
  local n
  n=$(grep -cF -- "$text" "$tmp/init" || true)
  if [ "$n" -ge 4 ]; then ok "$*: init fails on all 4 ranks with \"$text\""; else
    bad "$*: $n of 4 ranks said \"$text\""
    tail -8 "$tmp/init"
  fi
}

# expect_checked OUT N WHAT [COLL ALGO] — the bench output in OUT (run with
# -c, and --stats when COLL ALGO are given) shows 0 wrong elements on N
# ranks, and each of them ran COLL with ALGO.
expect_checked() {
  local out="$1" n="$2" what="$3" coll="${4:-}" algo="${5:-}"
  local wrong ran="$n"
  wrong=$(grep -c "# Wrong elements: 0$" "$out" || true)
  if [ -n "$algo" ]; then
    ran=$(grep -cE "# stats r[0-9]+ w0 ops\.$coll\.$algo [1-9]" "$out" || true)
  fi
  if [ "$wrong" -ge "$n" ] && [ "$ran" -ge "$n" ]; then
    ok "$what: $n ranks report 0 wrong elements${algo:+, every rank ran $algo}"
  else
    bad "$what: $wrong ranks with 0 wrong${algo:+, $ran ranks ran $algo}"
    tail -20 "$out"
  fi
}
