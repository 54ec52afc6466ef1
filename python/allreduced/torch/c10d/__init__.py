"""The `allreduced` backend of torch.distributed (c10d): unmodified torch.distributed and
DistributedDataParallel scripts run their collectives on the daemons.

    import allreduced.torch  # registers the backend (so does `import allreduced.torch.c10d`)
    torch.distributed.init_process_group("allreduced", init_method="env://")

Registered with torch.distributed.Backend.register_backend as a Python subclass of c10d's
Backend (torch's PyBackend trampoline dispatches each collective to it), so nothing is compiled
against torch. CPU tensors only (the daemon's TCP data plane). See backend.py for the collectives
and the sequence numbers that name them; work.py for the Work objects and their futures.
"""
import torch.distributed as dist

from allreduced.torch.c10d.backend import AllreducedBackend

NAME = "allreduced"


def _create(store, rank, size, timeout):
    return AllreducedBackend(store, rank, size, timeout)


def register():
    """Registers the backend with torch.distributed (once per process; later calls do nothing)."""
    if hasattr(dist.Backend, NAME.upper()):
        return
    dist.Backend.register_backend(NAME, _create, devices=["cpu"])


register()
