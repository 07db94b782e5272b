#!/usr/bin/env python3
"""Connections from outside a job, aimed at its coordinator or a TCP data port.

  intrude.py coordinator HOST:PORT GO READY
      # side-channel attacks (core/frame.h); then creates file GO and keeps a
      # silent connection open until file READY exists (the job has joined)
  intrude.py data HOST:PORT HOLD_S   # TCP transport attacks (transports/tcp/tcp_wire.h);
      # then holds a silent connection until the port drops it (its handshake
      # deadline), HOLD_S at most

Each attack is one connection; it prints what it did and what came back. It
never fails on a refusal (that is the point); it exits non-zero only when the
target answers something it must not (an Ack or a welcome to a stranger).
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

BOOT_MAGIC, BOOT_VERSION = 0x53524843, 3
HELLO, AUTH_INIT, AUTH_PROOF = 1, 6, 8


def dial(target):
    host, port = target.rsplit(":", 1)
    s = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    return s


def drain(s, seconds=3.0):
    """Everything the target sends until it closes or `seconds` pass."""
    s.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return got


def boot_frame(kind, payload, length=None):
    n = len(payload) if length is None else length
    return struct.pack("<IHHI", BOOT_MAGIC, BOOT_VERSION, kind, n) + payload


def coordinator(target, go, ready):
    bad = 0
    idle = dial(target)  # never speaks; held until the job has joined
    attacks = [
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("truncated", boot_frame(AUTH_INIT, os.urandom(10), length=32)),
        ("oversized", boot_frame(AUTH_INIT, b"", length=0xFFFFFFF0)),
        ("unauthenticated hello", boot_frame(HELLO, struct.pack("<iiQ", 1, 3, 0))),
    ]
    for name, data in attacks:
        s = dial(target)
        s.sendall(data)
        if name == "truncated":
            s.shutdown(socket.SHUT_WR)
        reply = drain(s)
        print(f"coordinator {name}: {len(reply)} bytes back")
        s.close()
    # A full handshake with a token that is not the job's.
    s = dial(target)
    nonce = os.urandom(32)
    s.sendall(boot_frame(AUTH_INIT, nonce))
    s.settimeout(5)
    challenge = b""
    while len(challenge) < 12 + 64:
        chunk = s.recv(12 + 64 - len(challenge))
        if not chunk:
            break
        challenge += chunk
    root_nonce = challenge[12:44]
    mac = hmac.new(b"not-the-token", b"chorus-bootstrap-v2 rank" + nonce + root_nonce,
                   hashlib.sha256).digest()
    s.sendall(boot_frame(AUTH_PROOF, mac) + boot_frame(HELLO, struct.pack("<iiQ", 2, 3, 0)))
    reply = drain(s)
    print(f"coordinator wrong token: challenge {len(challenge)} bytes, then {len(reply)} bytes")
    if reply:
        print("FAIL: the coordinator answered a stranger's proof")
        bad += 1
    s.close()
    open(go, "w").close()
    for _ in range(600):
        if os.path.exists(ready):
            break
        time.sleep(0.1)
    # The job formed while this caller had not said hello: rank 0 refuses it
    # as it refuses a late caller (an abort frame), rather than a bare close.
    reply = drain(idle)
    refused = b"had already formed" in reply
    print(f"coordinator silent: {len(reply)} bytes back"
          + (" (refused: the job had already formed)" if refused else ""))
    idle.close()
    return bad


def tcp_hello(nonce_target=0x1234, nonce_sender=0x5678):
    return (struct.pack("<IHHiiiHHQQ", 0x48524843, 3, 1, 1, 0, 0, 0, 0, nonce_target, nonce_sender)
            + os.urandom(32))


def data(target, hold):
    bad = 0
    idle = dial(target)  # says nothing; the acceptor's handshake deadline drops it
    for name, payload, close_early in [
        ("garbage", os.urandom(72), False),
        ("truncated", tcp_hello()[:20], True),
        ("oversized", tcp_hello() + os.urandom(1 << 20), False),
    ]:
        s = dial(target)
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if close_early:
            s.shutdown(socket.SHUT_WR)
        reply = drain(s)
        print(f"data {name}: {len(reply)} bytes back")
        if len(reply) > 72:
            print(f"FAIL: data port answered {name} beyond the challenge")
            bad += 1
        s.close()
    # A well-formed hello, then a proof made with a key that is not the job's.
    s = dial(target)
    hello = tcp_hello()
    s.sendall(hello)
    s.settimeout(5)
    challenge = b""
    while len(challenge) < 72:
        chunk = s.recv(72 - len(challenge))
        if not chunk:
            break
        challenge += chunk
    mac = hmac.new(os.urandom(32), b"chorus-tcp-v2 connector" + hello + challenge[8:40],
                   hashlib.sha256).digest()
    s.sendall(struct.pack("<II", 0x50524843, 0) + mac)
    reply = drain(s)
    print(f"data wrong key: challenge {len(challenge)} bytes, then {len(reply)} bytes")
    if reply:
        print("FAIL: the data port sent an Ack to a stranger")
        bad += 1
    s.close()
    # Held until the acceptor drops it, so that its handshake deadline, not
    # this script's patience, ends it: however late that deadline fires on a
    # loaded host, the drop is logged as "no handshake within".
    t0 = time.monotonic()
    drain(idle, hold)
    print(f"data silent: dropped by the port after {time.monotonic() - t0:.1f} s")
    idle.close()
    return bad


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "coordinator":
        return 1 if coordinator(sys.argv[2], sys.argv[3], sys.argv[4]) else 0
    if len(sys.argv) >= 4 and sys.argv[1] == "data":
        return 1 if data(sys.argv[2], float(sys.argv[3])) else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
