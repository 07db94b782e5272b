"""A TCP port on 127.0.0.1 that is free now, drawn below the kernel's
ephemeral range so that no outgoing connection (Open MPI's, another test's)
can take it before the job listens: the choice chorusrun makes
(tools/chorusrun/job_environment.cc). Run as a script it prints one; test
code imports free_port()."""
import random
import socket


def free_port():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    candidates = [random.randrange(20000, low) for _ in range(64)] if low > 21000 else []
    for port in candidates + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise SystemExit("free_port: no free port on 127.0.0.1")


if __name__ == "__main__":
    print(free_port())
