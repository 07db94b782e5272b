"""Every c10d ProcessGroup operation of torch 1.13 on backend "chorus",
checked element by element on every rank against a reference computed in
Python from all ranks' inputs (each rank can generate every rank's input).

One job per rank count (2, 3, 4); each rank runs every op for every dtype
both sides know, at sizes 0, 1 and 1031 (plus 2-D and non-contiguous
tensors), the object collectives, new_group subgroups, the Work/Future
semantics, and the error cases, whose exception type must be the one gloo
raises for the same call. Inputs are small integers, so every reduction is
exact in every dtype whatever the order; the comparison is torch.equal.

Point-to-point (the library's tagged send/recv): tags received in the
reverse order of the sends, isend-before-irecv on both sides, mixed sizes
on one tag (no overtaking), recv from any source with the sender rank it
returns, at sizes below the eager limit (8 KiB) and at 1 MiB and more
(rendezvous); size and dtype mismatches at the end, in a subgroup.
"""
import datetime
import functools
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jobs import assert_job_passed, run_job  # noqa: E402


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ops(world):
    assert_job_passed(run_job(os.path.abspath(__file__), world, timeout=240), "OPS PASSED")


# --------------------------------------------------------------------------
# Worker side

def _worker():
    import torch
    import torch.distributed as dist

    import chorus_torch  # noqa: F401

    rank = int(os.environ["RANK"])
    W = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("chorus", rank=rank, world_size=W,
                            timeout=datetime.timedelta(seconds=60))
    pg = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    R = dist.ReduceOp
    passed, failed = 0, []

    def check(name, got, want):
        nonlocal passed
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        if ok:
            passed += 1
        else:
            failed.append(name)
            print(f"FAIL {name}: got {got.dtype}{tuple(got.shape)} {got.reshape(-1)[:8]} "
                  f"want {want.dtype}{tuple(want.shape)} {want.reshape(-1)[:8]}", flush=True)

    def expect(name, cond):
        nonlocal passed
        if cond:
            passed += 1
        else:
            failed.append(name)
            print(f"FAIL {name}", flush=True)

    DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]
    INT = {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}

    def data(dtype, shape, r, salt, for_prod=False):
        """Rank r's input: small integers, exact under any reduction order
        (|sum| <= 12, |product| <= 16 at 4 ranks)."""
        g = torch.Generator().manual_seed(7919 * salt + 31 * r + 1)
        n = 1
        for s in shape:
            n *= s
        if dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g).bool().view(shape)
        lo = 0 if dtype == torch.uint8 else -1 if for_prod else -3
        hi = 3 if for_prod else 4
        v = torch.randint(lo, hi, (n,), generator=g)
        if dtype == torch.complex64:
            v = torch.complex(v.float(), torch.randint(lo, hi, (n,), generator=g).float())
        return v.to(dtype).view(shape)

    def all_inputs(dtype, shape, salt, for_prod=False):
        return [data(dtype, shape, r, salt, for_prod) for r in range(W)]

    def ref_reduce(xs, op):
        dt = xs[0].dtype
        if op in (R.BAND, R.BOR, R.BXOR):
            f = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
            return functools.reduce(f, xs)
        if dt == torch.bool:
            s = torch.stack(xs)
            return s.any(0) if op in (R.SUM, R.MAX) else s.all(0)
        wide = (torch.int64 if dt in INT else torch.complex128 if dt.is_complex
                else torch.float64)
        s = torch.stack([x.to(wide) for x in xs])
        out = {R.SUM: lambda: s.sum(0), R.PRODUCT: lambda: s.prod(0),
               R.MIN: lambda: s.amin(0), R.MAX: lambda: s.amax(0)}[op]()
        return out.to(dt)

    def ops_for(dtype):
        if dtype.is_complex:
            return [R.SUM]
        base = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
        if dtype == torch.bool or dtype in INT:
            base += [R.BAND, R.BOR, R.BXOR]
        return base

    def noncontig(x):
        """A non-contiguous 1-D tensor holding x's values (stride 2)."""
        buf = torch.zeros(2 * max(x.numel(), 1), dtype=x.dtype)
        v = buf[::2][:x.numel()]
        v.copy_(x.reshape(-1))
        return v

    MAX_TAG = 2**31 - 1  # c10d tags are ints; CHORUS_TAG_MAX

    def big(dtype):
        """An element count of at least 1 MiB of dtype: above the library's
        eager size, so the message goes by rendezvous."""
        return (1 << 20) // torch.empty(0, dtype=dtype).element_size() + 3

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

    SHAPES = [(0,), (1,), (1031,), (5, 7)]
    salt = 0
    for dtype in DTYPES:
        for shape in SHAPES:
            tag = f"{dtype} {shape}"
            for op in ops_for(dtype):
                salt += 1
                xs = all_inputs(dtype, shape, salt, for_prod=op == R.PRODUCT)
                want = ref_reduce(xs, op)
                t = xs[rank].clone()
                dist.all_reduce(t, op=op)
                check(f"all_reduce {tag} {op}", t, want)
                root = salt % W
                t = xs[rank].clone()
                dist.reduce(t, root, op=op)
                if rank == root:
                    check(f"reduce {tag} {op} root {root}", t, want)
                if op in (R.BAND, R.BOR, R.BXOR) or dtype.is_complex:
                    continue
                # reduce_scatter: rank r's list holds one block per rank.
                blocks = [[data(dtype, shape, r, salt * 100 + b, op == R.PRODUCT)
                           for b in range(W)] for r in range(W)]
                out = torch.empty(shape, dtype=dtype)
                dist.reduce_scatter(out, [b.clone() for b in blocks[rank]], op=op)
                check(f"reduce_scatter {tag} {op}", out,
                      ref_reduce([blocks[r][rank] for r in range(W)], op))
                out = torch.empty(shape, dtype=dtype)
                dist._reduce_scatter_base(out, torch.cat([b.reshape(-1) for b in blocks[rank]])
                                          .view(W * shape[0], *shape[1:]), op=op)
                check(f"_reduce_scatter_base {tag} {op}", out,
                      ref_reduce([blocks[r][rank] for r in range(W)], op))

            salt += 1
            xs = all_inputs(dtype, shape, salt)
            outs = [torch.empty(shape, dtype=dtype) for _ in range(W)]
            dist.all_gather(outs, xs[rank])
            for r in range(W):
                check(f"all_gather {tag} from {r}", outs[r], xs[r])
            flat = torch.empty((W * shape[0],) + shape[1:], dtype=dtype)
            dist._all_gather_base(flat, xs[rank])
            check(f"_all_gather_base {tag}", flat, torch.cat(xs))
            root = salt % W
            glist = [torch.empty(shape, dtype=dtype) for _ in range(W)] if rank == root else None
            dist.gather(xs[rank], glist, dst=root)
            if rank == root:
                for r in range(W):
                    check(f"gather {tag} root {root} from {r}", glist[r], xs[r])
            root = (salt + 1) % W
            src = all_inputs(dtype, shape, salt + 7)  # root's block r is src[r]
            out = torch.empty(shape, dtype=dtype)
            dist.scatter(out, [s.clone() for s in src] if rank == root else None, src=root)
            check(f"scatter {tag} root {root}", out, src[rank])
            for root in range(W):
                t = xs[rank].clone()
                dist.broadcast(t, src=root)
                check(f"broadcast {tag} root {root}", t, xs[root])
            # all_to_all (list) and all_to_all_single, equal blocks.
            a2a = [[data(dtype, shape, r, salt * 50 + p) for p in range(W)] for r in range(W)]
            outs = [torch.empty(shape, dtype=dtype) for _ in range(W)]
            dist.all_to_all(outs, [x.clone() for x in a2a[rank]])
            for p in range(W):
                check(f"all_to_all {tag} from {p}", outs[p], a2a[p][rank])
            out = torch.empty((W * shape[0],) + shape[1:], dtype=dtype)
            dist.all_to_all_single(out, torch.cat(a2a[rank]))
            check(f"all_to_all_single {tag}", out, torch.cat([a2a[p][rank] for p in range(W)]))

        # Non-contiguous inputs and outputs, 1-D, sizes 1 and 1031.
        for n in (1, 1031):
            tag = f"{dtype} non-contiguous n={n}"
            salt += 1
            xs = all_inputs(dtype, (n,), salt)
            t = noncontig(xs[rank])
            dist.all_reduce(t)
            check(f"all_reduce {tag}", t.contiguous(), ref_reduce(xs, R.SUM))
            t = noncontig(xs[rank])
            dist.broadcast(t, src=W - 1)
            check(f"broadcast {tag}", t.contiguous(), xs[W - 1])
            outs = [noncontig(torch.zeros(n, dtype=dtype)) for _ in range(W)]
            dist.all_gather(outs, noncontig(xs[rank]))
            for r in range(W):
                check(f"all_gather {tag} from {r}", outs[r].contiguous(), xs[r])
            out = noncontig(torch.zeros(n * W, dtype=dtype))
            dist._all_gather_base(out, noncontig(xs[rank]))
            check(f"_all_gather_base {tag}", out.contiguous(), torch.cat(xs))
            t = noncontig(xs[rank])
            dist.reduce(t, 0)
            if rank == 0:
                check(f"reduce {tag}", t.contiguous(), ref_reduce(xs, R.SUM))
            if not dtype.is_complex:
                blocks = [[data(dtype, (n,), r, salt * 100 + b) for b in range(W)] for r in range(W)]
                out = noncontig(torch.zeros(n, dtype=dtype))
                dist.reduce_scatter(out, [noncontig(b) for b in blocks[rank]])
                check(f"reduce_scatter {tag}", out.contiguous(),
                      ref_reduce([blocks[r][rank] for r in range(W)], R.SUM))
                out = noncontig(torch.zeros(n, dtype=dtype))
                dist._reduce_scatter_base(out, noncontig(torch.cat(blocks[rank])))
                check(f"_reduce_scatter_base {tag}", out.contiguous(),
                      ref_reduce([blocks[r][rank] for r in range(W)], R.SUM))
            out = noncontig(torch.zeros(n, dtype=dtype))
            dist.scatter(out, [noncontig(x) for x in xs] if rank == 1 else None, src=1)
            check(f"scatter {tag}", out.contiguous(), xs[rank])
            glist = [noncontig(torch.zeros(n, dtype=dtype)) for _ in range(W)] if rank == 0 else None
            dist.gather(noncontig(xs[rank]), glist, dst=0)
            if rank == 0:
                for r in range(W):
                    check(f"gather {tag} from {r}", glist[r].contiguous(), xs[r])
            out = noncontig(torch.zeros(n * W, dtype=dtype))
            a2a = [data(dtype, (n * W,), r, salt * 3) for r in range(W)]
            dist.all_to_all_single(out, noncontig(a2a[rank]))
            check(f"all_to_all_single {tag}", out.contiguous(),
                  torch.cat([a2a[p][rank * n:(rank + 1) * n] for p in range(W)]))

        # all_to_all_single with split sizes (some empty), rows of 3.
        def rows(r, p):
            return (r + 2 * p) % 3
        salt += 1
        ins = [data(dtype, (sum(rows(r, p) for p in range(W)), 3), r, salt) for r in range(W)]

        def block(r, p):  # rank r's rows for peer p
            start = sum(rows(r, q) for q in range(p))
            return ins[r][start:start + rows(r, p)]
        out = torch.empty((sum(rows(p, rank) for p in range(W)), 3), dtype=dtype)
        dist.all_to_all_single(out, ins[rank].clone(),
                               output_split_sizes=[rows(p, rank) for p in range(W)],
                               input_split_sizes=[rows(rank, p) for p in range(W)])
        check(f"all_to_all_single splits {dtype}", out, torch.cat([block(p, rank) for p in range(W)]))
        outs = [torch.empty((rows(p, rank), 3), dtype=dtype) for p in range(W)]
        dist.all_to_all(outs, [block(rank, p).clone() for p in range(W)])
        for p in range(W):
            check(f"all_to_all uneven {dtype} from {p}", outs[p], block(p, rank))

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

    # allreduce_coalesced and allgather_coalesced (torch wants one dtype per
    # call; shapes differ, one is empty).
    salt += 1
    shapes = [(3,), (0,), (2, 5)]
    for op in (R.SUM, R.MAX, R.BOR):
        xs = [all_inputs(torch.int32, s, salt + i) for i, s in enumerate(shapes)]
        ts = [x[rank].clone() for x in xs]
        dist.all_reduce_coalesced(ts, op=op)
        for i in range(len(shapes)):
            check(f"all_reduce_coalesced {op} tensor {i}", ts[i], ref_reduce(xs[i], op))
    for cdt in (torch.float64, torch.int8, torch.bool, torch.bfloat16):
        mixed = [(cdt, (4,)), (cdt, (0,)), (cdt, (3, 2)), (cdt, (5,))]
        xs = [all_inputs(dt, s, salt + 10 + i) for i, (dt, s) in enumerate(mixed)]
        outs = [[torch.empty(s, dtype=dt) for dt, s in mixed] for _ in range(W)]
        dist.all_gather_coalesced(outs, [x[rank] for x in xs])
        for r in range(W):
            for i in range(len(mixed)):
                check(f"all_gather_coalesced {cdt} from {r} tensor {i}", outs[r][i], xs[i][r])

    # barrier, and the object collectives.
    dist.barrier()
    objs = [{"rank": r, "items": list(range(r + 1)), "name": "r" * r} for r in range(W)]
    got = [None] * W
    dist.all_gather_object(got, objs[rank])
    expect("all_gather_object", got == objs)
    for root in range(W):
        lst = [objs[root], ("x", root)] if rank == root else [None, None]
        dist.broadcast_object_list(lst, src=root)
        expect(f"broadcast_object_list root {root}", lst == [objs[root], ("x", root)])
    root = W - 1
    got = [None] * W if rank == root else None
    dist.gather_object(objs[rank], got, dst=root)
    if rank == root:
        expect("gather_object", got == objs)
    out = [None]
    dist.scatter_object_list(out, [o for o in objs] if rank == 0 else None, src=0)
    expect("scatter_object_list", out[0] == objs[rank])

    # Subgroups: the odd ranks, and every rank but 0 (sorted, as new_group does).
    for members in ([r for r in range(W) if r % 2 == 1], list(range(1, W))):
        sub = dist.new_group(ranks=members, backend="chorus")
        salt += 1
        if rank not in members:
            continue
        n = len(members)
        me = members.index(rank)
        xs = {r: data(torch.int64, (100,), r, salt) for r in members}
        t = xs[rank].clone()
        dist.all_reduce(t, group=sub)
        check(f"subgroup {members} all_reduce", t, ref_reduce([xs[r] for r in members], R.SUM))
        t = xs[rank].clone()
        dist.broadcast(t, src=members[-1], group=sub)
        check(f"subgroup {members} broadcast", t, xs[members[-1]])
        outs = [torch.empty(100, dtype=torch.int64) for _ in range(n)]
        dist.all_gather(outs, xs[rank], group=sub)
        for i, r in enumerate(members):
            check(f"subgroup {members} all_gather from {r}", outs[i], xs[r])
        glist = [torch.empty(100, dtype=torch.int64) for _ in range(n)] if me == 0 else None
        dist.gather(xs[rank], glist, dst=members[0], group=sub)
        if me == 0:
            for i, r in enumerate(members):
                check(f"subgroup {members} gather from {r}", glist[i], xs[r])
        out = torch.empty(n * 4, dtype=torch.int64)
        dist.all_to_all_single(out, torch.cat([xs[rank][4 * i:4 * i + 4] for i in range(n)]),
                               group=sub)
        check(f"subgroup {members} all_to_all_single", out,
              torch.cat([xs[r][4 * me:4 * me + 4] for r in members]))
        got = [None] * n
        dist.all_gather_object(got, ("obj", rank), group=sub)
        expect(f"subgroup {members} all_gather_object", got == [("obj", r) for r in members])
        # Point-to-point in the subgroup takes global ranks; a recv from any
        # source returns the sender's global rank.
        if n > 1:
            if me == 0:
                froms = set()
                for _ in range(n - 1):
                    t = torch.empty(100, dtype=torch.int64)
                    src = dist.recv(t, group=sub, tag=4)
                    froms.add(src)
                    check(f"subgroup {members} recv from any source: {src}", t,
                          xs.get(src, torch.empty(0)))
                expect(f"subgroup {members} recv from any source: senders {sorted(froms)}",
                       sorted(froms) == members[1:])
                t = torch.empty(100, dtype=torch.int64)
                dist.recv(t, src=members[-1], group=sub, tag=6)
                check(f"subgroup {members} recv from {members[-1]}", t, xs[members[-1]])
            else:
                dist.send(xs[rank], members[0], group=sub, tag=4)
                if rank == members[-1]:
                    dist.send(xs[rank], members[0], group=sub, tag=6)

    # Work and Future semantics.
    salt += 1
    xs = all_inputs(torch.float32, (300,), salt)
    t = xs[rank].clone()
    w = dist.all_reduce(t, async_op=True)
    v = w.get_future().wait()
    expect("future value is the output tensor", len(v) == 1 and v[0].data_ptr() == t.data_ptr())
    check("future all_reduce", v[0], ref_reduce(xs, R.SUM))
    expect("completed after the future", w.is_completed() and w.is_success() and w.wait())
    outs = [torch.empty(300) for _ in range(W)]
    v = dist.all_gather(outs, xs[rank], async_op=True).get_future().wait()
    expect("all_gather future holds the output list",
           len(v) == 1 and len(v[0]) == W and all(v[0][r].data_ptr() == outs[r].data_ptr()
                                                  for r in range(W)))
    # A callback that issues and waits for another operation (as PowerSGD's do).
    a, b = xs[rank].clone(), (xs[rank] * 2).clone()
    fut = dist.all_reduce(a, async_op=True).get_future()
    chained = fut.then(lambda f: dist.all_reduce(b, async_op=True).get_future().wait()[0]
                       + f.value()[0])
    check("nested callback", chained.wait(), ref_reduce(xs, R.SUM) * 3)

    # Async ops return before the communication ends: rank 0 issues, then
    # the others issue only after rank 0 says so through the store.
    store = dist.distributed_c10d._get_default_store()
    t = xs[rank].clone()
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        expect("async op pending while peers have not joined", not w.is_completed())
        expect("future pending while peers have not joined", not w.get_future().done())
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=200))
            expect("wait(timeout) raises while pending", False)
        except RuntimeError as e:
            expect("wait(timeout) raises while pending: " + str(e), "not complete" in str(e))
        store.set("chorus_test/go", "1")
        w.wait()
    else:
        store.wait(["chorus_test/go"])
        w = dist.all_reduce(t, async_op=True)
        w.wait()
    check("async all_reduce after peers joined", t, ref_reduce(xs, R.SUM))
    expect("completed and successful", w.is_completed() and w.is_success())

    # An error reaches the future and wait: a recv that its peer never
    # matches, in a subgroup whose timeout is 2 s.
    short = dist.new_group(ranks=[0, 1], timeout=datetime.timedelta(seconds=2), backend="chorus")
    if rank == 0:
        w = dist.irecv(torch.empty(10), src=1, group=short)
        try:
            w.get_future().wait()
            expect("future raises the error", False)
        except RuntimeError as e:
            expect(f"future raises the error ({e})", "chorus" in str(e))
        try:
            w.wait()
            expect("wait raises the error", False)
        except RuntimeError as e:
            expect("wait raises the error", "chorus" in str(e))
        # (Work.exception() cannot be called from Python in torch 1.13: its
        # binding has no converter for std::exception_ptr, for any backend.)
        expect("failed work: completed, not successful",
               w.is_completed() and not w.is_success())
    dist.barrier()

    # Errors of the same kind as gloo's for the same direct ProcessGroup call.
    cpg, gpg = pg, gloo

    def same_error(name, call):
        kinds = []
        for p in (cpg, gpg):
            try:
                call(p)
                kinds.append(None)
            except Exception as e:  # noqa: BLE001
                kinds.append((type(e), str(e).splitlines()[0]))
        ok = kinds[0] is not None and kinds[1] is not None and kinds[0][0] is kinds[1][0]
        expect(f"error kind {name}: chorus {kinds[0]} gloo {kinds[1]}", ok)

    def opts(cls, **kw):
        o = cls()
        for k, v in kw.items():
            setattr(o, k, v)
        return o
    t = torch.ones(4)
    same_error("broadcast bad root", lambda p: p.broadcast([t], opts(dist.BroadcastOptions, rootRank=W)).wait())
    same_error("reduce bad root", lambda p: p.reduce([t], opts(dist.ReduceOptions, rootRank=-1)).wait())
    same_error("gather bad root", lambda p: p.gather([], [t], opts(dist.GatherOptions, rootRank=W + 3)).wait())
    same_error("scatter bad root", lambda p: p.scatter([t], [], opts(dist.ScatterOptions, rootRank=W)).wait())
    same_error("allgather short list", lambda p: p.allgather([[torch.ones(4)] * (W - 1)], [t]).wait())
    same_error("allgather size mismatch", lambda p: p.allgather([[torch.ones(5)] * W], [t]).wait())
    same_error("allgather dtype mismatch",
               lambda p: p.allgather([[torch.ones(4, dtype=torch.int32)] * W], [t]).wait())
    same_error("_allgather_base size mismatch",
               lambda p: p._allgather_base(torch.ones(4 * W + 1), t).wait())
    same_error("alltoall_base bad splits", lambda p: p.alltoall_base(
        torch.ones(4 * W), torch.ones(4 * W), [5] * W, [4] * W, dist.AllToAllOptions()).wait())
    # gloo (1.13) accepts a dim 0 that does not divide by the group size and
    # leaves the remainder unsent; chorus refuses it.
    try:
        cpg.alltoall_base(torch.ones(4 * W + 1), torch.ones(4 * W + 1), [], [],
                          dist.AllToAllOptions()).wait()
        expect("alltoall_base uneven dim 0 raises", False)
    except RuntimeError as e:
        expect("alltoall_base uneven dim 0 raises", "divide" in str(e))
    same_error("allreduce AVG",
               lambda p: p.allreduce([t], opts(dist.AllreduceOptions, reduceOp=R.AVG)).wait())
    same_error("allreduce BAND on floats",
               lambda p: p.allreduce([t], opts(dist.AllreduceOptions, reduceOp=R.BAND)).wait())
    # The group still works after those errors.
    salt += 1
    xs = all_inputs(torch.int64, (50,), salt)
    u = xs[rank].clone()
    dist.all_reduce(u)
    check("all_reduce after the error cases", u, ref_reduce(xs, R.SUM))

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

    dist.barrier()
    print(f"rank {rank}: {passed} passed, {len(failed)} failed", flush=True)
    if failed:
        sys.exit(1)
    print("OPS PASSED", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker()
