#!/usr/bin/env bash
# usage: run_ranks.sh LOOPBACK_RANKS PLUGIN_DIR N
# Runs plugins/loopback's ranks-as-threads program with N ranks on two free
# bootstrap ports (one per communicator), finding the loopback plugin in
# PLUGIN_DIR.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
if [ $# -ne 3 ]; then
  echo "usage: $0 LOOPBACK_RANKS PLUGIN_DIR N" >&2
  exit 2
fi
for var in $(compgen -e | grep '^CHORUS_'); do unset "$var"; done
ring_port=$(chorus_free_port)
mesh_port=$(chorus_free_port)
while [ "$mesh_port" = "$ring_port" ]; do mesh_port=$(chorus_free_port); done
CHORUS_PLUGIN_PATH="$2" exec "$1" "$3" "127.0.0.1:$ring_port" "127.0.0.1:$mesh_port"
