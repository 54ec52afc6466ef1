"""Horovod-style TensorFlow API over the allreduced daemon (work in progress: init, topology,
allreduce, allgather, broadcast, broadcast_variables; the rest of Horovod's surface is the
TensorFlow issue's remaining work).

Each process connects to its host's daemon (ALLREDUCED_SOCKET) and registers with its job
(ALLREDUCED_JOB, ranks from the launcher's environment) in init().
"""
import ctypes
import os

import tensorflow as tf

from allreduced.tensorflow.ops_library import library, ops

# Horovod's reduce-op objects; the values are the daemon's wire::ReduceOp numbers.
Sum = 1
Average = 2
Min = 3
Max = 4
Product = 5

_initialized = False


def init():
    """Connects to the local daemon and waits until every rank of the job registered."""
    global _initialized
    err = ctypes.create_string_buffer(512)
    code = library().allreduced_tf_init(err, ctypes.c_size_t(len(err)))
    if code != 0:
        raise RuntimeError("allreduced init failed: " + err.value.decode(errors="replace"))
    _initialized = True


def shutdown():
    global _initialized
    library().allreduced_tf_shutdown()
    _initialized = False


def is_initialized():
    return _initialized


def _topology():
    values = (ctypes.c_int * 6)()
    library().allreduced_tf_topology(values)
    if values[0] < 0:
        raise ValueError("allreduced has not been initialized; use allreduced.tensorflow.init().")
    return list(values)


def rank():
    return _topology()[0]


def size():
    return _topology()[1]


def local_rank():
    return _topology()[2]


def local_size():
    return _topology()[3]


def cross_rank():
    return _topology()[4]


def cross_size():
    return _topology()[5]


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """Reduces `tensor` over all ranks (Average by default, like Horovod)."""
    if average is not None and op is not None:
        raise ValueError("The op parameter supersedes average; set only one of them.")
    if op is None:
        op = Average if average is None or average else Sum
    tensor = tf.convert_to_tensor(tensor)
    return ops().allreduced_allreduce(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor, tensor_name=name or "")


def allgather(tensor, name=None):
    """Concatenates every rank's `tensor` along the first dimension (sizes may differ)."""
    return ops().allreduced_allgather(tf.convert_to_tensor(tensor), tensor_name=name or "")


def broadcast(tensor, root_rank, name=None):
    """Every rank gets `root_rank`'s `tensor`."""
    return ops().allreduced_broadcast(tf.convert_to_tensor(tensor), root_rank=root_rank,
                                      tensor_name=name or "")


def broadcast_variables(variables, root_rank):
    """Assigns every variable the value it has on `root_rank`."""
    for i, var in enumerate(variables):
        var.assign(broadcast(var, root_rank, name=f"broadcast_variables.{i}.{var.name}"))


@tf.RegisterGradient("AllreducedAllreduce")
def _allreduce_grad(op, grad):
    # Horovod: the gradient of an allreduce is the allreduce of the gradient, same op and scales.
    return ops().allreduced_allreduce(grad, reduce_op=op.get_attr("reduce_op"),
                                      prescale_factor=op.get_attr("prescale_factor"),
                                      postscale_factor=op.get_attr("postscale_factor"))
