"""Chorus as a torch.distributed backend.

Importing this package registers the backend name "chorus":

    import torch.distributed as dist
    import chorus_torch  # noqa: F401  (registers "chorus")
    dist.init_process_group("chorus", rank=rank, world_size=world_size,
                            init_method="tcp://host:port")

The communicator bootstraps through the process group's Store, so every
init_method torch supports (env://, tcp://, file://, torchrun) works and no
Chorus coordinator address is needed. CHORUS_* environment variables and
CHORUS_CONFIG still select the transport and algorithms.
"""
import torch.distributed as _dist

from . import _C

__all__ = ["counters", "create_process_group"]


def create_process_group(store, rank, world_size, timeout):
    """The creator torch calls for backend "chorus" (store, rank, size, timeout)."""
    return _C.create_process_group(store, rank, world_size, timeout)


def counters(group=None):
    """Chorus counters of `group` (default: the default group) as a dict."""
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    return _C.counters(pg)


if "CHORUS" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("chorus", create_process_group)
