"""Starts an N-process torch.distributed job (one process per rank, a
TCPStore rendezvous on a free port) and collects every rank's output."""
import os
import random
import socket
import subprocess
import sys
import time


def free_port():
    """A free 127.0.0.1 port below the ephemeral range, where no outgoing
    connection can take it before the store listens (tests/lib/free_port.sh)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in [random.randrange(20000, low) for _ in range(64)] if low > 21000 else []:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(script, world, timeout=240, args=(), env=None):
    """Runs `script` once per rank; returns [(exit code, output)] by rank.
    A job still running after `timeout` seconds is killed (its ranks report
    "(timed out)")."""
    base = dict(os.environ)
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
                OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    base.update(env or {})
    procs = [subprocess.Popen([sys.executable, script, *args], env=dict(base, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    deadline = time.time() + timeout
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += "\n(timed out)"
        results.append((p.returncode, out))
    for r, (rc, out) in enumerate(results):
        print(f"----- rank {r} of {world} (exit {rc}) -----\n{out}")
    return results


def assert_job_passed(results, marker):
    assert all(rc == 0 for rc, _ in results), "a rank failed; see its output above"
    for _, out in results:
        assert marker in out, f"'{marker}' missing from a rank's output"
