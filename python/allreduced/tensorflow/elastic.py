"""Elastic training (Horovod's hvd.elastic): a job that loses or gains ranks keeps training.

Run with $ALLREDUCED_ELASTIC_MIN_NP set (the elastic launcher sets it; $ALLREDUCED_ELASTIC_MAX_NP
optional): the daemon then forms each generation of the job from the ranks present. When a rank or
host is lost, every survivor's collectives fail with HorovodInternalError; `run` restores the last
committed state, registers again (the daemon numbers the survivors densely, in their old order)
and syncs rank 0's state to everyone. When ranks wait to join, the next `commit()` or
`check_host_updates()` raises HostsUpdatedInterrupt on every rank at once and the job re-forms
larger, the new ranks receiving rank 0's committed state. rank()/size() report the new topology
after each reset. $ALLREDUCED_ELASTIC_RESET_LIMIT bounds the resets (0 or unset: no bound).
"""

import tensorflow as tf

from allreduced.common import elastic as _common
from allreduced.common.elastic import State  # noqa: F401 (hvd.elastic.State)
from allreduced.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from allreduced.tensorflow import basics
from allreduced.tensorflow.collectives import allreduce, broadcast_variables
from allreduced.tensorflow.objects import broadcast_object
from allreduced.tensorflow.ops_library import library

# Text the daemon puts in every error of an elastic job's generation that ended (daemon/jobs).
_REFORM_MARK = " re-forms: "


def _recoverable(error):
    return isinstance(error, tf.errors.OpError) and _REFORM_MARK in (error.message or "")


def _hosts_updated(local=False):
    """True on every rank at once when any rank's daemon said that ranks wait to join, or some
    rank had a host update queued (`local`): one small allreduce, so that all ranks decide alike."""
    if not basics.is_initialized():
        return False
    mine = int(library().allreduced_tf_hosts_updated()) or int(bool(local))
    agreed = allreduce(tf.constant([mine], tf.int32), op=basics.Max,
                       name="elastic.check_host_updates")
    return int(agreed.numpy()[0]) > 0


class ObjectState(_common.ObjectState):
    """State of plain Python objects, given as keyword arguments and exposed as attributes."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         hosts_updated=_hosts_updated, **kwargs)


class TensorFlowState(ObjectState):
    """State of a list of tf.Variables (eager), plus keyword objects."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None:
            raise ValueError("allreduced: TensorFlowState needs its variables (eager mode only)")
        self.variables = list(variables)
        self.session = session
        self._save_variables()
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for var, value in zip(self.variables, self._values):
            var.assign(value)
        super().restore()

    def sync(self):
        if self.variables:
            broadcast_variables(self.variables, root_rank=0)
        self._save_variables()
        super().sync()

    def _save_variables(self):
        self._values = [var.numpy() for var in self.variables]


class TensorFlowKerasState(ObjectState):
    """State of a built Keras model and its optimizer (eager), plus keyword objects."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if hasattr(model, "built") and not model.built:
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        for var, value in zip(self.model.variables, self._saved_model):
            var.assign(value)
        for var, value in zip(_optimizer_variables(self.optimizer), self._saved_optimizer):
            var.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self.model.variables, root_rank=0)
        optimizer_vars = _optimizer_variables(self.optimizer)
        if optimizer_vars:
            broadcast_variables(optimizer_vars, root_rank=0)
        self._save_model()
        super().sync()

    def _save_model(self):
        self._saved_model = [tf.identity(var) for var in self.model.variables]
        self._saved_optimizer = [tf.identity(var)
                                 for var in _optimizer_variables(self.optimizer)]


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def run(func):
    """Decorator of the training function `func(state, ...)`: syncs `state` from rank 0, runs
    `func`, and on a lost rank (HorovodInternalError, or an op error of a generation that ended)
    restores the last commit, re-forms and runs it again; on joining ranks
    (HostsUpdatedInterrupt) re-forms and runs it again. Collectives must happen inside `func`,
    not around the call. Stops with RuntimeError after $ALLREDUCED_ELASTIC_RESET_LIMIT resets."""
    return _common.run_fn(func, lambda: _common.rejoin(basics), _recoverable,
                          lambda: bool(library().allreduced_tf_hosts_updated()))


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "State", "ObjectState",
           "TensorFlowState", "TensorFlowKerasState", "run"]
