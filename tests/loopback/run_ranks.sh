#!/usr/bin/env bash
# usage: run_ranks.sh LOOPBACK_RANKS PLUGIN_DIR N
# Runs plugins/loopback's ranks-as-threads program with N ranks on a free
# bootstrap port, finding the loopback plugin in PLUGIN_DIR.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/free_port.sh"
if [ $# -ne 3 ]; then
  echo "usage: $0 LOOPBACK_RANKS PLUGIN_DIR N" >&2
  exit 2
fi
for var in $(compgen -e | grep '^CHORUS_'); do unset "$var"; done
CHORUS_PLUGIN_PATH="$2" exec "$1" "$3" "127.0.0.1:$(chorus_free_port)"
