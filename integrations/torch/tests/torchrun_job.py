"""A minimal job for torchrun: all_reduce and all_gather over backend chorus."""
import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  (registers "chorus")

dist.init_process_group("chorus")  # env:// as set by torchrun
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.arange(100, dtype=torch.int64) + rank
dist.all_reduce(t)
assert torch.equal(t, torch.arange(100) * world + sum(range(world))), t
g = [torch.empty(3, dtype=torch.float32) for _ in range(world)]
dist.all_gather(g, torch.full((3,), float(rank)))
assert all(torch.equal(g[r], torch.full((3,), float(r))) for r in range(world)), g
print(f"torchrun job rank {rank}/{world}: OK", flush=True)
dist.destroy_process_group()
