"""Process sets: collectives among a subset of the job's ranks, like Horovod's ProcessSet. The
objects and their registry are framework-neutral (allreduced.common.process_sets); registering
and removing a set is in basics (init(process_sets=...) does it too)."""
import tensorflow as tf

from allreduced.common.process_sets import ProcessSet  # noqa: F401 (hvd.ProcessSet)
from allreduced.tensorflow.basics import (add_process_set, process_set_registry,  # noqa: F401
                                          remove_process_set)

global_process_set = process_set_registry.global_set


def process_set_included_op(process_set_id=0):
    """An int32 scalar: 1 when this rank belongs to the registered set `process_set_id`, else 0
    (0 is the global set)."""
    ps = process_set_registry.get(process_set_id)
    return tf.constant(1 if ps.included() else 0, tf.int32, name="process_set_included")


def _id(process_set):
    """The op attribute for `process_set`; raises when this rank is not a member."""
    return process_set_registry.op_id(process_set)


def _root(process_set, root_rank):
    """The op attribute for a broadcast root, given as a global rank as in Horovod."""
    return process_set_registry.op_root(process_set, root_rank)

