# Sourced by test scripts that start ranks by hand.
# chorus_free_port prints a TCP port on 127.0.0.1 that is free now, drawn
# below the kernel's ephemeral range so that no outgoing connection (Open
# MPI's, another test's) can take it before rank 0 listens; the same choice
# chorusrun makes (tools/chorusrun/job_environment.cc).
chorus_free_port() {
  /usr/bin/python3 - <<'PY'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
candidates = [random.randrange(20000, low) for _ in range(64)] if low > 21000 else []
for port in candidates + [0]:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    chosen = s.getsockname()[1]
    s.close()
    print(chosen)
    break
else:
    raise SystemExit("chorus_free_port: no free port on 127.0.0.1")
PY
}
