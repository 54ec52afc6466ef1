"""Python objects through the collectives (Horovod's broadcast_object, broadcast_object_fn,
allgather_object): pickled to uint8 tensors; the sizes travel first."""
import io
import pickle

import tensorflow as tf

from allreduced.tensorflow.collectives import allgather, broadcast
from allreduced.tensorflow.process_sets import global_process_set


def _to_tensor(obj):
    buf = io.BytesIO()
    pickle.dump(obj, buf)
    return tf.constant(list(buf.getvalue()), dtype=tf.uint8)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Every rank gets `root_rank`'s `obj` (any picklable object; others pass anything)."""
    name = name or type(obj).__name__
    if process_set.rank() == root_rank:
        data = _to_tensor(obj)
        length = tf.constant([int(data.shape[0])], tf.int64)
    else:
        data = None
        length = tf.constant([0], tf.int64)
    length = broadcast(length, root_rank, name=f"broadcast_object.{name}.size",
                       process_set=process_set)
    if data is None:
        data = tf.zeros([int(length.numpy()[0])], tf.uint8)
    data = broadcast(data, root_rank, name=f"broadcast_object.{name}.data",
                     process_set=process_set)
    return pickle.loads(data.numpy().tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from `root_rank` (Horovod's helper for graph mode;
    here the same as calling broadcast_object)."""
    def _fn(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)
    return _fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """A list with every rank's `obj`, in rank order."""
    name = name or type(obj).__name__
    data = _to_tensor(obj)
    sizes = allgather(tf.constant([int(data.shape[0])], tf.int64),
                      name=f"allgather_object.{name}.sizes", process_set=process_set).numpy()
    gathered = allgather(data, name=f"allgather_object.{name}.data",
                         process_set=process_set).numpy().tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[offset:offset + int(n)]))
        offset += int(n)
    return out
