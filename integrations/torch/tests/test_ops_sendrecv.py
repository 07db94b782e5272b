"""Point-to-point of the c10d ProcessGroup (torch 1.13) on backend "chorus":
the library's tagged send/recv, checked element by element on every rank
against each sender's input (ops_job.py).

One job per rank count (2, 3, 4): send/recv of every dtype around the ring;
tags received in the reverse order of the sends, isend-before-irecv on both
sides, every pair at once, batch_isend_irecv, mixed sizes on one tag (no
overtaking), recv from any source with the sender rank it returns, at sizes
below the eager limit (8 KiB) and at 1 MiB and more (rendezvous); negative
tags refused as gloo refuses them; size and dtype mismatches at the end, in
a subgroup.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ops_job import OpsJob, run_ops_job  # noqa: E402


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ops_sendrecv(world):
    run_ops_job(__file__, world)


# --------------------------------------------------------------------------
# Worker side

def _worker():
    job = OpsJob()
    torch, dist = job.torch, job.dist
    rank, W = job.rank, job.W
    check, expect, data, all_inputs = job.check, job.expect, job.data, job.all_inputs
    noncontig, big, same_error = job.noncontig, job.big, job.same_error
    DTYPES = job.DTYPES
    salt = 0

    MAX_TAG = 2**31 - 1  # c10d tags are ints; CHORUS_TAG_MAX

    def tagged_ring(dtype, n, nc, salt):
        """Rank r sends two tensors to r+1 with tags t1 then t2, and receives
        t2 first, then t1, from r-1. Below the eager size the sends are
        blocking (they complete before the receives are posted); above it
        they are isends, since a blocking one waits for its receive."""
        right, left = (rank + 1) % W, (rank - 1) % W
        t1, t2 = salt % 1000 + 1, MAX_TAG - salt
        a = all_inputs(dtype, (n,), salt)
        b = all_inputs(dtype, (n,), salt + 500000)
        wrap = noncontig if nc else torch.clone
        name = f"tagged send/recv {dtype} n={n}{' non-contiguous' if nc else ''}"
        works = []
        if n * a[0].element_size() < 8000:
            dist.send(wrap(a[rank]), right, tag=t1)
            dist.send(wrap(b[rank]), right, tag=t2)
        else:
            works = [dist.isend(wrap(a[rank]), right, tag=t1),
                     dist.isend(wrap(b[rank]), right, tag=t2)]
        x, y = wrap(torch.zeros(n, dtype=dtype)), wrap(torch.zeros(n, dtype=dtype))
        expect(f"{name}: recv returns its src", dist.recv(y, left, tag=t2) == left)
        dist.recv(x, left, tag=t1)
        for w in works:
            w.wait()
        check(f"{name} tag {t2} (received first)", y.contiguous(), b[left])
        check(f"{name} tag {t1}", x.contiguous(), a[left])

    for dtype in DTYPES:
        # send/recv of this dtype around the ring (even ranks send first).
        if W > 1:
            salt += 1
            xs = all_inputs(dtype, (257,), salt)
            right, left = (rank + 1) % W, (rank - 1) % W
            buf = torch.empty(257, dtype=dtype)
            if rank % 2 == 0:
                dist.send(xs[rank], right)
                dist.recv(buf, left)
            else:
                dist.recv(buf, left)
                dist.send(xs[rank], right)
            check(f"send/recv {dtype}", buf, xs[left])
            for n in (0, 257, big(dtype)):
                for nc in (False, True):
                    salt += 1
                    tagged_ring(dtype, n, nc, salt)

    # Point-to-point beyond the per-dtype ring above.
    if W > 1:
        right, left = (rank + 1) % W, (rank - 1) % W
        # Both neighbours isend first, then irecv: without matching on
        # (source, tag) this waits for the deadline at these sizes.
        for dtype in (torch.float32, torch.int8, torch.complex64):
            n = 2 * big(dtype)
            salt += 1
            to_right = all_inputs(dtype, (n,), salt)
            to_left = all_inputs(dtype, (n,), salt + 1)
            sends = [dist.isend(to_right[rank], right, tag=10),
                     dist.isend(to_left[rank], left, tag=11)]
            from_left, from_right = torch.zeros(n, dtype=dtype), torch.zeros(n, dtype=dtype)
            recvs = [dist.irecv(from_left, left, tag=10), dist.irecv(from_right, right, tag=11)]
            for w in recvs + sends:
                w.wait()
            expect(f"isend first {dtype}: works complete",
                   all(w.is_completed() and w.is_success() for w in recvs + sends))
            check(f"isend first {dtype} from the left", from_left, to_right[left])
            check(f"isend first {dtype} from the right", from_right, to_left[right])
        # Every rank isends to every other first, then irecvs in reverse rank
        # order; the futures complete with the tensors.
        salt += 1
        n = big(torch.float64)
        xs = {(r, p): data(torch.float64, (n,), r, salt * 10 + p) for r in range(W)
              for p in range(W) if r != p}
        sends = [dist.isend(xs[(rank, p)], p, tag=12) for p in range(W) if p != rank]
        bufs = {p: torch.zeros(n, dtype=torch.float64) for p in range(W) if p != rank}
        futs = {p: dist.irecv(bufs[p], p, tag=12).get_future()
                for p in sorted(bufs, reverse=True)}
        for p, f in futs.items():
            v = f.wait()
            expect(f"irecv future from {p} holds the tensor",
                   len(v) == 1 and v[0].data_ptr() == bufs[p].data_ptr())
            check(f"all pairs from {p}", bufs[p], xs[(p, rank)])
        for w in sends:
            w.wait()
        # batch_isend_irecv both ways round the ring.
        salt += 1
        n = big(torch.int32)
        xs = all_inputs(torch.int32, (n,), salt)
        fl, fr = torch.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)
        ops = [dist.P2POp(dist.isend, xs[rank], right, tag=13),
               dist.P2POp(dist.isend, xs[rank] + 1, left, tag=14),
               dist.P2POp(dist.irecv, fl, left, tag=13),
               dist.P2POp(dist.irecv, fr, right, tag=14)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check("batch_isend_irecv from the left", fl, xs[left])
        check("batch_isend_irecv from the right", fr, xs[right] + 1)
        # One sender, one tag, sizes small/large/small/empty: matched in the
        # order sent (a small message does not overtake a large one).
        salt += 1
        sizes = (5, big(torch.int16), 7, 0)
        xs = [all_inputs(torch.int16, (k,), salt + i) for i, k in enumerate(sizes)]
        sends = [dist.isend(xs[i][rank], right, tag=15) for i in range(len(sizes))]
        bufs = [torch.zeros(k, dtype=torch.int16) for k in sizes]
        for w in [dist.irecv(b, left, tag=15) for b in bufs] + sends:
            w.wait()
        for i, k in enumerate(sizes):
            check(f"one tag, message {i} of {k} elements, in send order", bufs[i], xs[i][left])

    # Recv from any source: rank 0 takes one tensor from every other rank
    # (its values identify the sender), eager and rendezvous sizes; then
    # irecvs without a source, and any-source receives that select a tag.
    # Each round has its own tag, so that a fast sender's next message
    # cannot take the place of a slow sender's.
    if W > 1:
        for tag, n in ((0, 33), (22, big(torch.int64))):
            salt += 1
            xs = all_inputs(torch.int64, (n,), salt)
            for r in range(W):
                xs[r][0] = r
            if rank == 0:
                froms = []
                for _ in range(W - 1):
                    t = torch.zeros(n, dtype=torch.int64)
                    src = dist.recv(t, tag=tag)
                    froms.append(src)
                    expect(f"recv from any source n={n}: sender {src} matches the data",
                           0 < src < W and int(t[0]) == src)
                    if 0 < src < W:
                        check(f"recv from any source n={n} from {src}", t, xs[src])
                expect(f"recv from any source n={n}: each sender once ({froms})",
                       sorted(froms) == list(range(1, W)))
                bufs = [torch.zeros(n, dtype=torch.int64) for _ in range(W - 1)]
                works = [dist.irecv(b, tag=tag + 1) for b in bufs]
                froms = []
                for w, b in zip(works, bufs):
                    w.wait()
                    src = w._source_rank()
                    froms.append(src)
                    expect(f"irecv from any source n={n}: source_rank() {src}",
                           w.source_rank() == src and 0 < src < W)
                    if 0 < src < W:
                        check(f"irecv from any source n={n} from {src}", b, xs[src] * 2)
                expect(f"irecv from any source n={n}: each sender once ({froms})",
                       sorted(froms) == list(range(1, W)))
            else:
                dist.send(xs[rank], 0, tag=tag)
                dist.send(xs[rank] * 2, 0, tag=tag + 1)
        # Each sender sends tag 8, then tag 7; rank 0 takes every tag 7 first.
        salt += 1
        xs = all_inputs(torch.float32, (20,), salt)
        if rank == 0:
            for want_tag, scale in ((7, 3), (8, 2)):
                froms = []
                for _ in range(W - 1):
                    t = torch.zeros(20)
                    src = dist.recv(t, tag=want_tag)
                    froms.append(src)
                    if 0 < src < W:
                        check(f"any source, tag {want_tag}, from {src}", t, xs[src] * scale)
                expect(f"any source, tag {want_tag}: each sender once ({froms})",
                       sorted(froms) == list(range(1, W)))
        else:
            dist.send(xs[rank] * 2, 0, tag=8)
            dist.send(xs[rank] * 3, 0, tag=7)
        # The sender is unknown while an any-source receive is pending; it
        # stays pending across a collective, and the last rank sends after it.
        if rank == 0:
            t = torch.zeros(3)
            w = dist.irecv(t, tag=9)
            try:
                w._source_rank()
                expect("source rank of a pending any-source recv raises", False)
            except RuntimeError as e:
                expect(f"source rank of a pending any-source recv raises ({e})",
                       "wait()" in str(e))
            dist.barrier()
            w.wait()
            expect("any-source recv across a barrier: source", w._source_rank() == W - 1)
            check("any-source recv across a barrier", t, torch.full((3,), float(W)))
        else:
            dist.barrier()
            if rank == W - 1:
                dist.send(torch.full((3,), float(W)), 0, tag=9)

    # Negative tags are refused as gloo refuses them.
    t = torch.ones(4)
    same_error("send negative tag", lambda p: p.send([t], (rank + 1) % W, -1).wait())
    same_error("recv negative tag", lambda p: p.recv([t], (rank + 1) % W, -2).wait())
    same_error("recv_anysource negative tag", lambda p: p.recv_anysource([t], -1).wait())

    # Mismatches, in a subgroup of ranks 0 and 1. The library refuses a
    # message larger than the receive or of another dtype (the receive
    # fails, nothing is written; above the eager size the send fails too);
    # the backend refuses a message smaller than the tensor (c10d cannot
    # say how much came).
    mm = dist.new_group(ranks=[0, 1], backend="chorus")
    if rank in (0, 1):
        n = big(torch.float32)
        cases = [  # name, sent (count, dtype), received (count, dtype), sender fails
            ("eager, tensor too small", (100, torch.float32), (50, torch.float32), False),
            ("rendezvous, tensor too small", (n, torch.float32), (n - 1, torch.float32), True),
            ("eager, other dtype", (100, torch.float32), (100, torch.int32), False),
            ("rendezvous, other dtype", (n, torch.float32), (n, torch.int32), True),
            ("eager, tensor too large", (100, torch.float32), (101, torch.float32), False),
            ("rendezvous, tensor too large", (n, torch.float32), (n + 1, torch.float32), False),
        ]
        for i, (name, (ns, dts), (nr, dtr), sender_fails) in enumerate(cases):
            if rank == 0:
                try:
                    dist.send(torch.ones(ns, dtype=dts), 1, group=mm, tag=50 + i)
                    expect(f"mismatch {name}: send completes", not sender_fails)
                except RuntimeError as e:
                    expect(f"mismatch {name}: send raises ({e})",
                           sender_fails and "mismatch" in str(e).lower())
            else:
                t = torch.zeros(nr, dtype=dtr)
                try:
                    dist.recv(t, 0, group=mm, tag=50 + i)
                    expect(f"mismatch {name}: recv raises", False)
                except RuntimeError as e:
                    expect(f"mismatch {name}: recv raises ({e})", "mismatch" in str(e).lower())
                if nr < ns or dtr != dts:
                    expect(f"mismatch {name}: nothing written", not t.any())
        # The subgroup still works afterwards.
        if rank == 0:
            dist.send(torch.arange(10.), 1, group=mm, tag=60)
        else:
            t = torch.zeros(10)
            dist.recv(t, 0, group=mm, tag=60)
            check("send/recv after the mismatches", t, torch.arange(10.))
        u = torch.ones(3)
        dist.all_reduce(u, group=mm)
        check("all_reduce after the mismatches", u, torch.full((3,), 2.))

    job.finish()


if __name__ == "__main__":
    _worker()
