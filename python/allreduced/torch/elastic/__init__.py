"""Elastic training with PyTorch (Horovod's hvd.elastic): `run`, TorchState, ElasticSampler and
the common ObjectState, on the framework-neutral core (allreduced.common.elastic) and the
daemon's job generations, as for TensorFlow. Run under the elastic launcher
($ALLREDUCED_ELASTIC_MIN_NP): a lost rank fails every survivor's collectives with
HorovodInternalError; `run` restores the last commit, re-registers (ranks renumbered densely in
their old order) and syncs rank 0's state; joining ranks make commit()/check_host_updates() raise
HostsUpdatedInterrupt everywhere at once."""
import os


from allreduced.common import elastic as _core
from allreduced.common.elastic import State  # noqa: F401 (hvd.elastic.State)
from allreduced.torch import basics
from allreduced.torch.elastic.sampler import ElasticSampler
from allreduced.torch.elastic.state import TorchState, hosts_updated_everywhere
from allreduced.torch.functions import broadcast_object


class ObjectState(_core.ObjectState):
    """State of plain Python objects (keyword arguments), synced from rank 0."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         hosts_updated=hosts_updated_everywhere, **kwargs)


def _reset():
    """Leaves the generation that ended and registers for the next one, keeping this process's
    place in rank order."""
    order = basics.rank() if basics.is_initialized() else None
    basics.shutdown()
    if order is not None and order >= 0:
        os.environ["ALLREDUCED_ELASTIC_ORDER"] = str(order)
    basics.init()


def run(func):
    """Decorator of the training function `func(state, ...)` (see the module doc). Collectives
    must happen inside `func`, not around the call."""
    return _core.run_fn(func, _reset)


__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]
