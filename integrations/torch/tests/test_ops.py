"""The c10d ProcessGroup collectives of torch 1.13 on backend "chorus",
checked element by element on every rank against a reference computed in
Python from all ranks' inputs (ops_job.py).

One job per rank count (2, 3, 4); each rank runs every collective for every
dtype both sides know, at sizes 0, 1 and 1031 (plus 2-D and non-contiguous
tensors, and all_to_all with uneven splits), the coalesced forms, barrier
and the object collectives, and new_group subgroups (point-to-point inside
a subgroup included). Point-to-point is in test_ops_sendrecv.py, Work/Future
semantics and the error cases in test_ops_work.py.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ops_job import OpsJob, run_ops_job  # noqa: E402


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ops(world):
    run_ops_job(__file__, world)


# --------------------------------------------------------------------------
# Worker side

def _worker():
    job = OpsJob()
    torch, dist, R = job.torch, job.dist, job.R
    rank, W = job.rank, job.W
    check, expect, data, all_inputs = job.check, job.expect, job.data, job.all_inputs
    ref_reduce, ops_for, noncontig = job.ref_reduce, job.ops_for, job.noncontig
    DTYPES = job.DTYPES

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

    job.finish()


if __name__ == "__main__":
    _worker()
