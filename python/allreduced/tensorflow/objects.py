"""Python objects through the collectives (Horovod's broadcast_object, broadcast_object_fn,
allgather_object): pickled to uint8 tensors; the sizes travel first. They run at once, in eager
mode and while a tf.compat.v1 graph is built (in a session of their own: basics.evaluate_now)."""
import io
import pickle

import numpy as np
import tensorflow as tf

from allreduced.tensorflow.basics import evaluate_now, rank
from allreduced.tensorflow.collectives import allgather, broadcast
from allreduced.tensorflow.process_sets import global_process_set


def _to_bytes(obj):
    buf = io.BytesIO()
    pickle.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Every rank gets `root_rank`'s `obj` (any picklable object; others pass anything, so the
    default name does not depend on `obj`)."""
    name = name or "object"
    if process_set is not global_process_set and not process_set.included():
        return obj  # nothing to receive outside the set
    is_root = rank() == root_rank  # a global rank, also with a process set (as in Horovod)
    data = _to_bytes(obj) if is_root else np.zeros([0], np.uint8)
    length = evaluate_now(lambda: broadcast(
        tf.constant([data.shape[0]], tf.int64), root_rank, name=f"broadcast_object.{name}.size",
        process_set=process_set))
    if not is_root:
        data = np.zeros([int(length[0])], np.uint8)
    data = evaluate_now(lambda: broadcast(tf.constant(data), root_rank,
                                          name=f"broadcast_object.{name}.data",
                                          process_set=process_set))
    return pickle.loads(data.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from `root_rank` (Horovod's helper for graph mode;
    here the same as calling broadcast_object)."""
    def _fn(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)
    return _fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """A list with every rank's `obj`, in rank order."""
    name = name or "object"  # not obj's type: ranks may pass objects of different types
    data = _to_bytes(obj)
    sizes = evaluate_now(lambda: allgather(tf.constant([data.shape[0]], tf.int64),
                                           name=f"allgather_object.{name}.sizes",
                                           process_set=process_set))
    gathered = evaluate_now(lambda: allgather(tf.constant(data),
                                              name=f"allgather_object.{name}.data",
                                              process_set=process_set)).tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[offset:offset + int(n)]))
        offset += int(n)
    return out
