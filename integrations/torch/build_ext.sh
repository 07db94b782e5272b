#!/usr/bin/env bash
# Builds chorus_torch into <out> against the Chorus source tree and build tree.
# Used by the ctest fixture torch.build; fails (never skips) without torch.
set -euo pipefail
python=$1 src=$2 include=$3 libdir=$4 out=$5
if ! "$python" -c "import torch, torch.distributed" 2>/dev/null; then
  echo "torch.build: $python cannot import torch; install Debian's python3-torch (scripts/install-deps.sh)" >&2
  exit 1
fi
cd "$src"
CHORUS_INCLUDE_DIR=$include CHORUS_LIBRARY_DIR=$libdir MAX_JOBS=${MAX_JOBS:-2} \
  "$python" setup.py -q build --build-lib "$out" --build-temp "$out/tmp"
# The import check loads this build's libchorus even when the run path points
# at an install location that does not hold it yet.
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$python" - "$out" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import chorus_torch  # noqa: F401  (registers the backend)
import torch.distributed as dist
assert "CHORUS" in dist.Backend._plugins, "backend not registered"
print("torch.build: chorus_torch built and registered in", sys.argv[1])
PY
