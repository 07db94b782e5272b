#!/usr/bin/python3
"""Transparent TCP proxy that holds every byte for a fixed delay.

The host kernel has no netem, so the netns tests add latency here instead.
The harness runs one proxy inside each rank's namespace and installs an
nftables rule there that DNATs every outgoing TCP connection to the proxy's
port. The proxy reads the original destination from conntrack
(SO_ORIGINAL_DST), dials it itself with SO_MARK set (the rule lets marked
connections pass untouched), and forwards both directions, releasing each
chunk DELAY_MS after it was read.

Every connection is opened by exactly one side, so it crosses exactly one
proxy and each direction is delayed once: like netem's `delay DELAY_MS` on
every host's interface, a round trip gains 2 * DELAY_MS.

What this does not model: the delay is applied to the byte stream between
two TCP connections, not to packets on the wire, so TCP's own behaviour on a
long path (congestion window, retransmission timers) is not exercised; what
is exercised is Chorus seeing every message, handshake and side-channel
frame arrive DELAY_MS late.

usage: delay_proxy.py LISTEN_ADDR LISTEN_PORT DELAY_MS MARK
Prints "ready" on stdout once it is listening.
"""
import asyncio
import socket
import struct
import sys
import time

SO_ORIGINAL_DST = 80
CHUNK = 256 * 1024
# Chunks buffered per direction; bounds memory and gives backpressure.
QUEUE_CHUNKS = 64


def original_destination(sock):
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack_from("!H", raw, 2)[0]
    addr = socket.inet_ntoa(raw[4:8])
    return addr, port


async def pump(reader, writer, delay_s):
    """Copies reader to writer, each chunk released delay_s after its arrival.

    Reading and writing run as two tasks joined by a bounded queue, so the
    delay is added once per chunk rather than accumulating across chunks.
    """
    queue = asyncio.Queue(QUEUE_CHUNKS)

    async def read_side():
        try:
            while True:
                data = await reader.read(CHUNK)
                await queue.put((time.monotonic() + delay_s, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await queue.put((time.monotonic(), None))

    async def write_side():
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:  # the source broke: reset the other side too
                    writer.transport.abort()
                    return
                if not data:  # orderly end: pass the half-close on
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            writer.transport.abort()

    reading = asyncio.ensure_future(read_side())
    try:
        await write_side()
    finally:
        reading.cancel()


async def handle(client_reader, client_writer, delay_s, mark):
    sock = client_writer.get_extra_info("socket")
    try:
        addr, port = original_destination(sock)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.setblocking(False)
        # The connection attempt itself is delayed too, as the SYN would be.
        await asyncio.sleep(delay_s)
        await asyncio.get_running_loop().sock_connect(upstream, (addr, port))
        server_reader, server_writer = await asyncio.open_connection(sock=upstream)
    except (ConnectionError, OSError):
        client_writer.transport.abort()
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.gather(pump(client_reader, server_writer, delay_s),
                         pump(server_reader, client_writer, delay_s))
    client_writer.close()
    server_writer.close()


async def main():
    listen_addr, listen_port = sys.argv[1], int(sys.argv[2])
    delay_s = float(sys.argv[3]) / 1000.0
    mark = int(sys.argv[4], 0)
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, delay_s, mark), listen_addr, listen_port, backlog=256)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    asyncio.run(main())
