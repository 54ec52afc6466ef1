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


def _topology_op(index, name):
    return tf.py_function(lambda: tf.constant(_topology()[index], tf.int32), [], tf.int32,
                          name=name)


def rank_op(name=None):
    """The rank as a graph op (evaluated when run, so a tf.function traced before init works)."""
    return _topology_op(0, name or "rank_op")


def size_op(name=None):
    return _topology_op(1, name or "size_op")


def local_rank_op(name=None):
    return _topology_op(2, name or "local_rank_op")


def local_size_op(name=None):
    return _topology_op(3, name or "local_size_op")


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


_group_counter = [0]


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0):
    """Reduces a list of tensors as one atomic group (negotiated together, like Horovod)."""
    if op is None:
        op = Average if average is None or average else Sum
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    # Every rank makes its grouped calls in the same order, so this counter agrees across ranks.
    _group_counter[0] += 1
    return ops().allreduced_grouped_allreduce(tensors, reduce_op=op, group_id=_group_counter[0],
                                              prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor,
                                              tensor_name=name or f"grouped.{_group_counter[0]}")


def alltoall(tensor, splits=None, name=None):
    """Sends rows of `tensor` to every rank (`splits[r]` rows to rank r; even split when None);
    returns (received tensor, rows received from each rank)."""
    tensor = tf.convert_to_tensor(tensor)
    splits = tf.zeros([0], tf.int64) if splits is None else tf.cast(splits, tf.int64)
    return ops().allreduced_alltoall(tensor, splits, tensor_name=name or "")


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over all ranks and gives each rank its block of rows (the first
    dim % size ranks get one row more, like Horovod)."""
    return ops().allreduced_reducescatter(tf.convert_to_tensor(tensor), reduce_op=op,
                                          prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor,
                                          tensor_name=name or "")


def barrier(name=None):
    """Returns once every rank reached the barrier."""
    return ops().allreduced_barrier(tensor_name=name or "barrier")


def join():
    """This rank has no more data: it contributes the identity to other ranks' allreduces until
    every rank joined. Returns the last rank that joined."""
    return int(ops().allreduced_join(tensor_name="join").numpy())


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


def mpi_built():
    return False


def gloo_built():
    return False


def nccl_built():
    return False  # the GPU path is the GPU issue's work


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def mpi_enabled():
    return False


def gloo_enabled():
    return False


class Compression:
    """Horovod's gradient compression: `none`, or `fp16` (cast floating tensors to float16 for the
    collective and back afterwards)."""

    class none:  # noqa: N801 (Horovod's name)
        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor

    class fp16:  # noqa: N801
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating and tensor.dtype != tf.float16:
                return tf.cast(tensor, tf.float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tf.cast(tensor, ctx) if ctx is not None else tensor


class DistributedGradientTape(tf.GradientTape):
    """A GradientTape whose gradient() averages (or `op`-reduces) every gradient over all ranks,
    like horovod.tensorflow.DistributedGradientTape."""

    def __init__(self, persistent=False, watch_accessed_variables=True,
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0):
        super().__init__(persistent=persistent, watch_accessed_variables=watch_accessed_variables)
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = gradient_predivide_factor

    def gradient(self, target, sources, output_gradients=None):
        grads = super().gradient(target, sources, output_gradients)
        flat = tf.nest.flatten(grads)
        reduced = []
        for i, g in enumerate(flat):
            if g is None:
                reduced.append(None)
                continue
            if isinstance(g, tf.IndexedSlices):
                g = tf.convert_to_tensor(g)  # dense: simple and correct (sparse_as_dense)
            compressed, ctx = self._compression.compress(g)
            if self._op == Average and self._predivide != 1.0:
                out = allreduce(compressed, op=Sum, name=f"DistributedGradientTape.{i}",
                                prescale_factor=1.0 / self._predivide,
                                postscale_factor=self._predivide / size())
            else:
                out = allreduce(compressed, op=self._op, name=f"DistributedGradientTape.{i}")
            reduced.append(self._compression.decompress(out, ctx))
        return tf.nest.pack_sequence_as(grads, reduced)


@tf.RegisterGradient("AllreducedAllgather")
def _allgather_grad(op, grad):
    # Horovod: sum the gradient over ranks, then each rank keeps the rows it contributed.
    summed = ops().allreduced_allreduce(grad, reduce_op=Sum)
    rows = tf.shape(op.inputs[0])[0]
    all_rows = ops().allreduced_allgather(tf.reshape(rows, [1]))
    start = tf.reduce_sum(all_rows[:rank()])
    return summed[start:start + rows]


@tf.RegisterGradient("AllreducedBroadcast")
def _broadcast_grad(op, grad):
    # Horovod: the root receives the sum of every rank's gradient, the others zero.
    summed = ops().allreduced_allreduce(grad, reduce_op=Sum)
    if rank() != op.get_attr("root_rank"):
        return tf.zeros_like(summed)
    return summed
