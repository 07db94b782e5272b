"""Starts an N-process torch.distributed job (one process per rank, a
TCPStore rendezvous on a free port) and collects every rank's output."""
import os
import subprocess
import sys
import time

# The port choice shared with the shell tests (tests/lib/free_port.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tests", "lib"))
from free_port import free_port  # noqa: E402,F401  (test_backend.py imports it from here)


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
