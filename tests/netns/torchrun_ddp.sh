#!/usr/bin/env bash
# PyTorch DDP across two "hosts": torchrun in each of 2 namespaces with 2
# ranks each (--nnodes 2, c10d rendezvous hosted by namespace 0), backend
# chorus with transport auto (shm inside a namespace, tcp across), training
# the MLP of integrations/torch/tests/torchrun_ddp.py, which compares its
# parameters with the same training over gloo and fails on a difference.
# usage: torchrun_ddp.sh PYTHON EXT_DIR   (EXT_DIR holds the built chorus_torch)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

python="$1" ext="$2"
job="$here/../../integrations/torch/tests/torchrun_ddp.py"
netns_init "$python"
netns_create 2
rdzv_port=29400

# torchrun's agents publish the worker store's address as the hostname of
# the node with rank 0 (socket.getfqdn()), and the namespaces share this
# machine's hostname. So each node runs in its own UTS namespace with the
# hostname chorus-nodeN, which /etc/netns/<ns>/hosts (bind-mounted over
# /etc/hosts by `ip netns exec`) resolves to the node's address.
etc_dirs=()
for n in 0 1; do
  d="/etc/netns/$(netns_ns $n)"
  mkdir -p "$d" || netns_fail "mkdir $d"
  etc_dirs+=("$d")
  printf '127.0.0.1 localhost\n%s chorus-node0\n%s chorus-node1\n' \
    "$(netns_addr 0)" "$(netns_addr 1)" >"$d/hosts"
done
trap 'rc=$?; rm -rf "${etc_dirs[@]}"; rmdir /etc/netns 2>/dev/null; (exit $rc); netns_cleanup' EXIT

# Node n runs one torchrun in namespace n; its files are the harness's
# per-"rank" files for index n (pid.n, rc.n, out.n, err.n).
unset_args=()
for v in $(compgen -e | grep '^CHORUS_'); do unset_args+=(-u "$v"); done
for n in 0 1; do
  (
    # --redirects/--tee 2: Debian's torchrun 1.13 cannot parse its defaults.
    ip netns exec "$(netns_ns $n)" unshare --uts \
      sh -c 'hostname "$0" && exec "$@"' "chorus-node$n" env "${unset_args[@]}" \
      PYTHONPATH="$ext" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 \
      CHORUS_TRANSPORT=auto CHORUS_BIND_ADDRESS="$(netns_addr $n)" \
      GLOO_SOCKET_IFNAME=eth0 \
      "$python" -m torch.distributed.run --nnodes 2 --nproc_per_node 2 \
      --rdzv_backend c10d --rdzv_endpoint "$(netns_addr 0):$rdzv_port" --rdzv_id chorus-netns \
      --rdzv_conf "is_host=$((n == 0 ? 1 : 0))" --redirects 2 --tee 2 --max_restarts 0 \
      "$job" >"$NETNS_DIR/out.$n" 2>"$NETNS_DIR/err.$n" &
    p=$!
    echo "$p" >"$NETNS_DIR/pid.$n"
    wait "$p"
    echo "$? ${EPOCHREALTIME/./}" >"$NETNS_DIR/rc.$n.tmp"
    mv "$NETNS_DIR/rc.$n.tmp" "$NETNS_DIR/rc.$n"
  ) 2>/dev/null &
  NETNS_PIDS+=($!)
done
for n in 0 1; do until [ -s "$NETNS_DIR/pid.$n" ]; do sleep 0.01; done; done

passed=0 failed=0
netns_wait_ranks 240 0 1 || { failed=$((failed + 1)); netns_dump; }
for n in 0 1; do
  cat "$NETNS_DIR/out.$n"
  rc=$(netns_rank_rc "$n")
  # Distinct ranks that said OK: torchrun's tee can put two ranks' lines on
  # one output line, so count occurrences, not lines.
  # (the verdict is the last word of each rank's message: "...: OK" or "...: FAIL")
  oks=$(grep -oE 'torchrun ddp rank [0-9]+/[0-9]+ [^:]*: max [^:]*: (OK|FAIL)' "$NETNS_DIR/out.$n" |
        grep -E ': OK$' | grep -oE 'rank [0-9]+/' | sort -u | wc -l)
  if [ "$rc" = 0 ] && [ "$oks" = 2 ]; then
    passed=$((passed + 1))
  else
    echo "FAIL: node $n: torchrun exit $rc, $oks of 2 ranks OK"
    grep -v "^\s*$" "$NETNS_DIR/err.$n" | grep -vE "^\s*(File|\^)" | head -n 40
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
