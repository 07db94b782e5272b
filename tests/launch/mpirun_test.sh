#!/usr/bin/env bash
# Runs a 4-rank Chorus job under Debian's Open MPI mpirun: once bootstrapped
# through MPI_Allgather, once from Open MPI's rank variables plus a
# coordinator passed with -x. usage: mpirun_test.sh PROGRAM
set -euo pipefail
prog="$1"
mpirun=$(command -v mpirun.openmpi || command -v mpirun)
common=(--allow-run-as-root --oversubscribe -np 4 --mca btl self,tcp --mca btl_tcp_if_include lo
        --mca oob_tcp_if_include lo)
timeout 300 "$mpirun" "${common[@]}" "$prog" host-bootstrap
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
port=$(chorus_free_port)
timeout 300 "$mpirun" "${common[@]}" -x CHORUS_COORDINATOR=127.0.0.1:$port "$prog" env
