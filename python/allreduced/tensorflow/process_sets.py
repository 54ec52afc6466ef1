"""Process sets: collectives among a subset of the job's ranks, like Horovod's ProcessSet.

Each set is registered collectively (every rank of the job calls add_process_set in the same
order); its members open one more connection to their daemon and form a sub-job "<job>.ps<id>",
so the daemon negotiates, fuses and reduces among the members only (Average divides by the set's
size). Non-members keep no state for it beyond the ProcessSet object."""
import ctypes

import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.ops_library import library, ops


class ProcessSet:
    """A subset of ranks. `ranks` sorted; `process_set_id` assigned when registered."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"process set ranks must be distinct: {ranks}")
        self.process_set_id = None

    def _require_registered(self):
        if self.process_set_id is None:
            raise ValueError("process set is not registered: pass it to init(process_sets=...) "
                             "or add_process_set()")

    def included(self):
        self._require_registered()
        return self.process_set_id == 0 or basics.rank() in self.ranks

    def rank(self):
        self._require_registered()
        if self.process_set_id == 0:
            return basics.rank()
        return self.ranks.index(basics.rank()) if self.included() else -1

    def size(self):
        self._require_registered()
        return basics.size() if self.process_set_id == 0 else len(self.ranks)

    def __repr__(self):
        if self.process_set_id == 0:
            return "ProcessSet(process_set_id=0, ranks=all)"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        self.ranks = None
        self.process_set_id = 0


global_process_set = _GlobalProcessSet()
_registered = {}  # id -> ProcessSet
_next_id = [1]


def _forget_all():
    for ps in _registered.values():
        ps.process_set_id = None
    _registered.clear()
    _next_id[0] = 1


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks); every rank of the job must call this, in the
    same order. Returns the ProcessSet."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps} is already registered")
    size = basics.size()
    if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= size:
        raise ValueError(f"process set ranks {ps.ranks} must be in [0, {size})")
    for other in _registered.values():
        if other.ranks == ps.ranks:
            raise ValueError(f"a process set with ranks {ps.ranks} is already registered: {other}")
    # Which host holds each rank, so members know their local rank and size within the set.
    hosts = basics.evaluate_now(lambda: ops().allreduced_allgather(
        tf.constant([basics.cross_rank()], tf.int32),
        tensor_name=f"process_set.{_next_id[0]}.hosts"))
    ps_id = _next_id[0]
    _next_id[0] += 1
    me = basics.rank()
    if me in ps.ranks:
        local = [r for r in ps.ranks if hosts[r] == hosts[me]]
        err = ctypes.create_string_buffer(512)
        code = library().allreduced_tf_add_process_set(
            ps_id, ps.ranks.index(me), len(ps.ranks), local.index(me), len(local), err,
            ctypes.c_size_t(len(err)))
        basics._check_call(code, err, f"add_process_set({ps.ranks})")
    ps.process_set_id = ps_id
    _registered[ps_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set (collectively). Returns True when it was registered."""
    ps_id = process_set.process_set_id
    if not ps_id or _registered.get(ps_id) is not process_set:
        return False
    library().allreduced_tf_remove_process_set(ps_id)
    del _registered[ps_id]
    process_set.process_set_id = None
    return True


def process_set_included_op(process_set_id=0):
    """An int32 scalar: 1 when this rank belongs to the registered set `process_set_id`, else 0
    (0 is the global set)."""
    ps = global_process_set if process_set_id == 0 else _registered.get(process_set_id)
    if ps is None:
        raise ValueError(f"no process set with id {process_set_id} is registered")
    return tf.constant(1 if ps.included() else 0, tf.int32, name="process_set_included")


def _id(process_set):
    """The op attribute for `process_set`; raises when this rank is not a member."""
    if process_set is None or process_set is global_process_set:
        return 0
    process_set._require_registered()
    if not process_set.included():
        raise ValueError(f"rank {basics.rank()} is not a member of {process_set}")
    return process_set.process_set_id
