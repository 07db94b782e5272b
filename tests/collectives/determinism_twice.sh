#!/usr/bin/env bash
# Runs determinism_check twice and requires the same digest both times.
# usage: determinism_twice.sh CHORUSRUN CHECK NRANKS ALGORITHM
set -euo pipefail
run() { "$1" -n "$3" --no-prefix --timeout 300 -- "$2" -a "$4" | grep '^digest'; }
first=$(run "$@")
second=$(run "$@")
echo "run 1: $first"
echo "run 2: $second"
[ -n "$first" ] && [ "$first" = "$second" ]
