#!/usr/bin/env python3
"""SIGKILLs a whole shm job in the middle of its transport set-up.

  kill_in_init.py NS PID...

Waits until the last rank has opened a shm endpoint (a named segment of it
shows in /dev/shm, as older versions made them, or it holds a
"memfd:chorus-shm-" descriptor), stops it (SIGSTOP) before it can hand its
addresses to the others, waits until every other rank has opened endpoints
too (at most 2 s), then SIGKILLs every pid. Prints where the kill landed;
the caller counts what is left.
"""
import os
import signal
import sys
import time

ns, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]


def has_endpoint(pid):
    if any(n.startswith(f"chorus-shm-{ns}-{pid}-") for n in os.listdir("/dev/shm")):
        return True
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:chorus-shm-"):
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


def wait_for(pred, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.0005)
    return False


stage = "before any endpoint was open"
if wait_for(lambda: has_endpoint(pids[-1]), 10):
    os.kill(pids[-1], signal.SIGSTOP)
    stage = "with the last rank stopped at its first endpoint"
    if wait_for(lambda: all(has_endpoint(p) for p in pids[:-1]), 2):
        stage += ", every rank's endpoints open"
for p in pids:
    try:
        os.kill(p, signal.SIGKILL)
    except ProcessLookupError:
        pass
print(stage)
