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
import functools
import os

import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.collectives import allreduce, broadcast_variables
from allreduced.tensorflow.objects import broadcast_object
from allreduced.tensorflow.ops_library import library


class HorovodInternalError(RuntimeError):
    """A collective failed because the job lost a rank or host: recoverable in `run` (the state
    is restored to its last commit and the job re-forms)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Ranks wait to join the job: `run` re-forms it without restoring the state.
    `skip_sync`: the state need not be synced afterwards (never here: joiners need it)."""

    def __init__(self, skip_sync=False):
        super().__init__("allreduced: ranks wait to join the elastic job; re-forming")
        self.skip_sync = skip_sync


# Text the daemon puts in every error of an elastic job's generation that ended (daemon/jobs).
_REFORM_MARK = " re-forms: "


def _recoverable(error):
    return isinstance(error, tf.errors.OpError) and _REFORM_MARK in (error.message or "")


class State:
    """Training state kept in memory on every rank: `commit` saves it (and checks for joining
    ranks), `restore` goes back to the last commit, `sync` gives every rank rank 0's state."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions to call after each reset (e.g. to scale the learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state, then raises HostsUpdatedInterrupt if ranks wait to join."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank at once when any rank's daemon said that
        ranks wait to join (one small allreduce, so that all ranks decide alike)."""
        if not basics.is_initialized():
            return
        mine = int(library().allreduced_tf_hosts_updated())
        agreed = allreduce(tf.constant([mine], tf.int32), op=basics.Max,
                           name="elastic.check_host_updates")
        if int(agreed.numpy()[0]) > 0:
            raise HostsUpdatedInterrupt(False)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the state is synced."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and exposed as attributes."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)


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


def _reset():
    """Leaves the generation that ended and registers for the next one, keeping this process's
    place in rank order."""
    order = basics.rank() if basics.is_initialized() else None
    basics.shutdown()
    if order is not None and order >= 0:
        os.environ["ALLREDUCED_ELASTIC_ORDER"] = str(order)
    basics.init()


def _reset_limit():
    value = os.environ.get("ALLREDUCED_ELASTIC_RESET_LIMIT", "")
    return int(value) if value else 0


def run(func):
    """Decorator of the training function `func(state, ...)`: syncs `state` from rank 0, runs
    `func`, and on a lost rank (HorovodInternalError) restores the last commit, re-forms and runs
    it again; on joining ranks (HostsUpdatedInterrupt) re-forms and runs it again. Collectives
    must happen inside `func`, not around the call. Stops with RuntimeError after
    $ALLREDUCED_ELASTIC_RESET_LIMIT resets."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        resets = 0
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            except tf.errors.OpError as error:
                if not _recoverable(error):
                    raise
                state.restore()
                skip_sync = False
            resets += 1
            limit = _reset_limit()
            if limit and resets > limit:
                raise RuntimeError(f"allreduced: elastic job reached its reset limit of {limit} "
                                   "(ALLREDUCED_ELASTIC_RESET_LIMIT); stopping")
            _reset()
            state.on_reset()

    return wrapper


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "State", "ObjectState",
           "TensorFlowState", "TensorFlowKerasState", "run"]
