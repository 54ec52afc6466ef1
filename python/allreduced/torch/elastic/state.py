"""TorchState: the training state of an elastic PyTorch job, kept in memory on every rank.
Models and optimizers (and ElasticSampler) given as keyword arguments are saved with their
state_dict at commit(), restored from it after a lost rank, and synced from rank 0 after each
reset (model parameters and optimizer state by broadcast, the sampler's position by
broadcast_object); any other keyword value is a plain object (common ObjectState)."""
import copy

import torch

from allreduced.common import elastic as _elastic
from allreduced.torch import basics
from allreduced.torch.elastic.sampler import ElasticSampler
from allreduced.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                        broadcast_parameters)


class _Handler:
    """One state_dict-holding value: save/restore/sync (a model, optimizer or sampler)."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        if isinstance(self.value, torch.nn.Module):
            broadcast_parameters(self.value.state_dict(), root_rank=0)
        elif isinstance(self.value, torch.optim.Optimizer):
            broadcast_optimizer_state(self.value, root_rank=0)
        else:  # ElasticSampler: rank 0's epoch and position, re-split among the new ranks
            self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0,
                                                        name="TorchState.sampler"))
        self.save()


def hosts_updated_everywhere(local=False):
    """True on every rank at once when any rank's daemon said that ranks wait to join, or some
    rank had a host update queued (`local`): one small allreduce, so that all ranks decide alike."""
    from allreduced.torch.autograd import allreduce
    if not basics.is_initialized():
        return False
    mine = torch.tensor([1 if basics.hosts_updated() or local else 0], dtype=torch.int32)
    return int(allreduce(mine, op=basics.Max, name="elastic.check_host_updates")[0]) > 0


def _tracked(value):
    return isinstance(value, (torch.nn.Module, torch.optim.Optimizer, ElasticSampler))


class TorchState(_elastic.ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        self._handlers = {k: _Handler(v) for k, v in kwargs.items() if _tracked(v)}
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        plain = {k: v for k, v in kwargs.items() if k not in self._handlers}
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank,
                         hosts_updated=hosts_updated_everywhere, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            if isinstance(handler.value, ElasticSampler):
                handler.value.reset()
