"""A DDP job for torchrun (env:// rendezvous as torchrun sets it up): every
rank trains the same small MLP for 50 steps with DDP over a chorus group and
again over a gloo group, from the same parameters and data, and compares.

Bitwise equal at 2 ranks (two-operand sums do not depend on order); at more
ranks within 2e-5 absolute + 2e-4 relative, the bound test_ddp.py states and
justifies. Used by test_torchrun.py (4 ranks, --standalone) and by
tests/netns/torchrun_ddp.sh (2 namespaces x 2 ranks, c10d rendezvous)."""
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # noqa: F401  (registers "chorus")

dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
groups = {"chorus": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}


def train(backend):
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    ddp = DDP(model, process_group=groups[backend])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(50):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


pc, pg = train("chorus"), train("gloo")
diff = (pc - pg).abs().max().item()
same = torch.equal(pc, pg) if world == 2 else torch.allclose(pc, pg, atol=2e-5, rtol=2e-4)
everyone = [torch.empty_like(pc) for _ in range(world)]
dist.all_gather(everyone, pc, group=groups["gloo"])
agree = all(torch.equal(everyone[0], p) for p in everyone)
transport = chorus_torch.counters()  # the chorus group was used
ok = same and agree and transport["bytes_sent"] > 0
print(f"torchrun ddp rank {rank}/{world} (local {os.environ.get('LOCAL_RANK')}): "
      f"max |chorus - gloo| {diff:.3g}, ranks agree {agree}: {'OK' if ok else 'FAIL'}", flush=True)
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
