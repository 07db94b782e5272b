"""torch.distributed with backend "chorus" against backend "gloo".

test_torchrun runs a 2-process job under torchrun.

test_chorus_matches_gloo starts a 4-process job (this file run as a script,
one process per rank, rendezvous through a TCPStore). Every rank runs each
operation on the same input tensors once through a chorus group and once
through a gloo group, and compares the results: exactly for integers and for
float sums of small integers, within a tight tolerance for other floats.
"""
import os
import subprocess
import sys
import time

WORLD = 4
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jobs import free_port  # noqa: E402


def test_chorus_matches_gloo():
    port = free_port()
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD),
               OMP_NUM_THREADS="1")
    procs = []
    for rank in range(WORLD):
        e = dict(env, RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.time() + 240
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += "\n(timed out)"
        outputs.append(out)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        print(f"----- rank {rank} (exit {p.returncode}) -----\n{out}")
    assert all(p.returncode == 0 for p in procs), "a rank failed; see its output above"
    for out in outputs:
        assert "ALL CHECKS PASSED" in out


def test_torchrun():
    # Debian's torchrun 1.13 on Python 3.11 cannot parse "--redirects 0" /
    # "--tee 0" (its defaults: Std.from_str returns None for 0 and composite
    # values, then fails with "'NoneType' object has no attribute 'get'"), so
    # pass a single stream explicitly.
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    cmd = torchrun + ["--redirects", "2", "--tee", "2", "--nproc_per_node", "2",
                      "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                      os.path.join(HERE, "torchrun_job.py")]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    print(p.stdout)
    assert p.returncode == 0
    for r in range(2):
        assert f"torchrun job rank {r}/2: OK" in p.stdout


# --------------------------------------------------------------------------
# Worker side


def _worker():
    import datetime

    import torch
    import torch.distributed as dist

    import chorus_torch

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("chorus", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    assert dist.get_backend() == "chorus"
    chorus = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(1234 + rank)
    checks = 0

    def same(name, a, b, exact):
        nonlocal checks
        checks += 1
        if exact:
            assert torch.equal(a, b), f"{name}: chorus {a} != gloo {b}"
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")

    def inputs(dtype, n, salt, small=True):
        # small: integers in [-8, 8], so float sums are exact in any order
        # and float products of (x / 8 + 1) too; else normal floats.
        g = torch.Generator().manual_seed(1000 * rank + salt)
        if dtype.is_floating_point and not small:
            return torch.randn(n, generator=g).to(dtype)
        if dtype.is_floating_point:
            return torch.randint(-8, 9, (n,), generator=g).to(dtype)
        return torch.randint(-1000, 1000, (n,), generator=g).to(dtype)

    def for_prod(x):
        # keep products representable: integers to -1/0/1, floats near 1
        if x.dtype.is_floating_point:
            return x / 8 + 1
        return torch.where(x.abs() > 2, torch.sign(x), x)

    dtypes = [torch.float32, torch.float64, torch.int32, torch.int64]
    ops = [("sum", dist.ReduceOp.SUM), ("prod", dist.ReduceOp.PRODUCT), ("min", dist.ReduceOp.MIN),
           ("max", dist.ReduceOp.MAX)]
    sizes = [1, 7, 1000, 4099]
    salt = 0
    for dtype in dtypes:
        for n in sizes:
            for opname, op in ops:
                salt += 1
                small = salt % 2 == 1
                x = inputs(dtype, n, salt, small)
                if opname == "prod":
                    x = for_prod(x)
                exact = not dtype.is_floating_point or small or opname in ("min", "max")
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op, group=chorus)
                dist.all_reduce(b, op=op, group=gloo)
                same(f"all_reduce {dtype} n={n} {opname}", a, b, exact)

                # reduce_scatter: list form (gloo in 1.13 has no reduce_scatter,
                # so its reference is all_reduce + this rank's chunk).
                parts = [inputs(dtype, n, salt * 10 + r, small) for r in range(world)]
                if opname == "prod":
                    parts = [for_prod(p) for p in parts]
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, [p.clone() for p in parts], op=op, group=chorus)
                ref = torch.cat(parts)
                dist.all_reduce(ref, op=op, group=gloo)
                same(f"reduce_scatter {dtype} n={n} {opname}", out, ref[rank * n:(rank + 1) * n], exact)

            x = inputs(dtype, n, salt + 5000)
            ga = [torch.empty(n, dtype=dtype) for _ in range(world)]
            gb = [torch.empty(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(ga, x, group=chorus)
            dist.all_gather(gb, x, group=gloo)
            for r in range(world):
                same(f"all_gather {dtype} n={n} from {r}", ga[r], gb[r], True)

            for root in range(world):
                x = inputs(dtype, n, salt + 6000 + root)
                a, b = x.clone(), x.clone()
                dist.broadcast(a, src=root, group=chorus)
                dist.broadcast(b, src=root, group=gloo)
                same(f"broadcast {dtype} n={n} root={root}", a, b, True)

    # Non-contiguous tensors go through a staging copy.
    x = inputs(torch.float32, 64, 1).view(8, 8).t()
    a, b = x.clone(), x.contiguous().clone()
    dist.all_reduce(a, group=chorus)
    dist.all_reduce(b, group=gloo)
    same("all_reduce non-contiguous", a.contiguous(), b, True)

    # Async: several outstanding works, waited in reverse order.
    xs = [inputs(torch.float64, 513, 7 + 2 * i) for i in range(6)]
    works, results = [], []
    for i, x in enumerate(xs):
        a = x.clone()
        works.append(dist.all_reduce(a, group=chorus, async_op=True))
        results.append(a)
    ga = [torch.empty(513, dtype=torch.float64) for _ in range(world)]
    wg = dist.all_gather(ga, xs[0], group=chorus, async_op=True)
    wb = dist.barrier(group=chorus, async_op=True)
    wb.wait()
    wg.wait()
    for w in reversed(works):
        w.wait()
        assert w.is_completed() and w.is_success()
    for i, x in enumerate(xs):
        b = x.clone()
        dist.all_reduce(b, group=gloo)
        same(f"async all_reduce {i}", results[i], b, True)
    gb = [torch.empty(513, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gb, xs[0], group=gloo)
    for r in range(world):
        same(f"async all_gather from {r}", ga[r], gb[r], True)

    # send/recv around the ring: even ranks send first.
    right, left = (rank + 1) % world, (rank - 1) % world
    for dtype in (torch.float32, torch.int64):
        x = inputs(dtype, 3001, 99)
        got = {}
        for name, group in (("chorus", chorus), ("gloo", gloo)):
            buf = torch.empty(3001, dtype=dtype)
            if rank % 2 == 0:
                dist.send(x, right, group=group)
                dist.recv(buf, left, group=group)
            else:
                dist.recv(buf, left, group=group)
                dist.send(x, right, group=group)
            got[name] = buf
        same(f"send/recv {dtype}", got["chorus"], got["gloo"], True)

    # A chorus subgroup (new_group bootstraps through a prefixed Store), with
    # a gloo subgroup of the same ranks as reference.
    sub_ranks = [1, 3]
    sub_chorus = dist.new_group(ranks=sub_ranks, backend="chorus")
    sub_gloo = dist.new_group(ranks=sub_ranks, backend="gloo")
    if rank in sub_ranks:
        x = inputs(torch.int64, 777, 4242)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, group=sub_chorus)
        dist.all_reduce(b, group=sub_gloo)
        same("subgroup all_reduce", a, b, True)
        sc = chorus_torch.counters(sub_chorus)
        assert sum(v for k, v in sc.items() if k.startswith("ops.all_reduce.")) == 1, sc

    dist.barrier(group=chorus)
    c = chorus_torch.counters()
    assert c["bytes_sent"] > 0 and c["errors"] == 0, c
    assert sum(v for k, v in c.items() if k.startswith("ops.all_reduce.")) > 0, c
    print(f"rank {rank}: {checks} comparisons, ALL CHECKS PASSED", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker()
