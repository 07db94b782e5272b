"""What the c10d operation tests (test_ops.py, test_ops_sendrecv.py,
test_ops_work.py) share: starting their jobs from pytest, and on the worker
side the process group setup, the pass/fail bookkeeping, each rank's inputs
(every rank can generate every rank's input), the Python reference for
reductions, and the comparison with gloo's errors.

Inputs are small integers, so every reduction is exact in every dtype
whatever the order; the comparison is torch.equal.
"""
import datetime
import functools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jobs import assert_job_passed, run_job  # noqa: E402

MARKER = "OPS PASSED"


def run_ops_job(script, world):
    """pytest side: runs `script` as a job of `world` ranks; every rank must
    print MARKER."""
    assert_job_passed(run_job(os.path.abspath(script), world, timeout=240), MARKER)


def opts(cls, **kw):
    """An options object of `cls` with the given attributes set."""
    o = cls()
    for k, v in kw.items():
        setattr(o, k, v)
    return o


class OpsJob:
    """One rank of an operations job: a chorus default group of WORLD_SIZE
    ranks (60 s timeout) and a gloo group of the same ranks for comparison."""

    def __init__(self):
        import torch
        import torch.distributed as dist

        import chorus_torch  # noqa: F401

        self.torch, self.dist = torch, dist
        self.rank = int(os.environ["RANK"])
        self.W = int(os.environ["WORLD_SIZE"])
        dist.init_process_group("chorus", rank=self.rank, world_size=self.W,
                                timeout=datetime.timedelta(seconds=60))
        self.pg = dist.group.WORLD
        self.gloo = dist.new_group(backend="gloo")
        self.R = dist.ReduceOp
        self.passed, self.failed = 0, []
        self.DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                       torch.float16, torch.bfloat16, torch.float32, torch.float64,
                       torch.complex64]
        self.INT = {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}

    def check(self, name, got, want):
        torch = self.torch
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)
            print(f"FAIL {name}: got {got.dtype}{tuple(got.shape)} {got.reshape(-1)[:8]} "
                  f"want {want.dtype}{tuple(want.shape)} {want.reshape(-1)[:8]}", flush=True)

    def expect(self, name, cond):
        if cond:
            self.passed += 1
        else:
            self.failed.append(name)
            print(f"FAIL {name}", flush=True)

    def data(self, dtype, shape, r, salt, for_prod=False):
        """Rank r's input: small integers, exact under any reduction order
        (|sum| <= 12, |product| <= 16 at 4 ranks)."""
        torch = self.torch
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

    def all_inputs(self, dtype, shape, salt, for_prod=False):
        return [self.data(dtype, shape, r, salt, for_prod) for r in range(self.W)]

    def ref_reduce(self, xs, op):
        torch, R, INT = self.torch, self.R, self.INT
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

    def ops_for(self, dtype):
        R = self.R
        if dtype.is_complex:
            return [R.SUM]
        base = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
        if dtype == self.torch.bool or dtype in self.INT:
            base += [R.BAND, R.BOR, R.BXOR]
        return base

    def noncontig(self, x):
        """A non-contiguous 1-D tensor holding x's values (stride 2)."""
        buf = self.torch.zeros(2 * max(x.numel(), 1), dtype=x.dtype)
        v = buf[::2][:x.numel()]
        v.copy_(x.reshape(-1))
        return v

    def big(self, dtype):
        """An element count of at least 1 MiB of dtype: above the library's
        eager size, so the message goes by rendezvous."""
        return (1 << 20) // self.torch.empty(0, dtype=dtype).element_size() + 3

    def same_error(self, name, call):
        """Errors of the same kind as gloo's for the same direct ProcessGroup
        call: `call(pg)` must raise on the chorus group and on gloo's, with
        exceptions of one type."""
        kinds = []
        for p in (self.pg, self.gloo):
            try:
                call(p)
                kinds.append(None)
            except Exception as e:  # noqa: BLE001
                kinds.append((type(e), str(e).splitlines()[0]))
        ok = kinds[0] is not None and kinds[1] is not None and kinds[0][0] is kinds[1][0]
        self.expect(f"error kind {name}: chorus {kinds[0]} gloo {kinds[1]}", ok)

    def finish(self):
        """Prints the counts; exits 1 when a check failed, else prints MARKER."""
        self.dist.barrier()
        print(f"rank {self.rank}: {self.passed} passed, {len(self.failed)} failed", flush=True)
        if self.failed:
            sys.exit(1)
        print(MARKER, flush=True)
        self.dist.destroy_process_group()
