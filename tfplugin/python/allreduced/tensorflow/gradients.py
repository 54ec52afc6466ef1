"""Gradients of the collectives, as Horovod defines them, registered with TensorFlow."""
import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Average, Sum
from allreduced.tensorflow.ops_library import ops
from allreduced.tensorflow.process_sets import _registered


def _set_rank_and_size(op):
    ps = op.get_attr("process_set_id")
    if ps == 0:
        return basics.rank(), basics.size(), ps
    return _registered[ps].rank(), _registered[ps].size(), ps


def _reducescatter_scale(op):
    """Horovod's reducescatter gradient scale: the allgathered gradient times the set's size for
    Sum, times 1 for Average, and times the pre/postscale factors; Horovod scripts and tests
    expect exactly these values."""
    _, size, _ = _set_rank_and_size(op)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == Sum:
        scale *= size
    elif op.get_attr("reduce_op") != Average:
        raise NotImplementedError("allreduced: only Sum and Average collectives have gradients")
    return scale


# The gradient graphs below have the same structure on every rank: the rank only enters as a
# value. TensorFlow's graph optimizer simplifies what it can prove (a slice that is empty on rank
# 0, a tensor multiplied away on non-root ranks) and would drop a collective on some ranks only,
# leaving the others waiting for it.
@tf.RegisterGradient("AllreducedAllreduce")
def _allreduce_grad(op, grad):
    # The gradient of an allreduce is the allreduce of the gradient, same op and scales.
    return ops().allreduced_allreduce(grad, reduce_op=op.get_attr("reduce_op"),
                                      prescale_factor=op.get_attr("prescale_factor"),
                                      postscale_factor=op.get_attr("postscale_factor"),
                                      process_set_id=op.get_attr("process_set_id"))


@tf.RegisterGradient("AllreducedGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return [ops().allreduced_allreduce(g, reduce_op=op.get_attr("reduce_op"),
                                       prescale_factor=op.get_attr("prescale_factor"),
                                       postscale_factor=op.get_attr("postscale_factor"),
                                       process_set_id=op.get_attr("process_set_id"))
            for g in grads]


def _gather_grad(input_rows, grad, rank, ps):
    # Sum the gradient over ranks, then each rank keeps the rows it contributed.
    summed = ops().allreduced_allreduce(grad, reduce_op=Sum, process_set_id=ps)
    all_rows = ops().allreduced_allgather(tf.reshape(input_rows, [1]), process_set_id=ps)
    start = tf.cumsum(all_rows, exclusive=True)[rank]
    return summed[start:start + input_rows]


@tf.RegisterGradient("AllreducedAllgather")
def _allgather_grad(op, grad):
    rank, _, ps = _set_rank_and_size(op)
    return _gather_grad(tf.shape(op.inputs[0])[0], grad, rank, ps)


@tf.RegisterGradient("AllreducedGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    rank, _, ps = _set_rank_and_size(op)
    return [_gather_grad(tf.shape(x)[0], g, rank, ps) for x, g in zip(op.inputs, grads)]


@tf.RegisterGradient("AllreducedBroadcast")
def _broadcast_grad(op, grad):
    # The root receives the sum of every rank's gradient, the others zero.
    rank, _, ps = _set_rank_and_size(op)
    summed = ops().allreduced_allreduce(grad, reduce_op=Sum, process_set_id=ps)
    return summed * tf.cast(1 if rank == op.get_attr("root_rank") else 0, summed.dtype)


@tf.RegisterGradient("AllreducedAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    # Rows travel back where they came from: an alltoall of the gradient with the received splits.
    back, _ = ops().allreduced_alltoall(grad, op.outputs[1],
                                        process_set_id=op.get_attr("process_set_id"))
    return back, None


@tf.RegisterGradient("AllreducedReducescatter")
def _reducescatter_grad(op, grad):
    # Each rank's input row i fed the output block holding row i: gather the blocks' gradients.
    gathered = ops().allreduced_allgather(grad, process_set_id=op.get_attr("process_set_id"))
    return gathered * tf.cast(_reducescatter_scale(op), gathered.dtype)


@tf.RegisterGradient("AllreducedGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    scale = _reducescatter_scale(op)
    ps = op.get_attr("process_set_id")
    out = []
    for g in grads:
        gathered = ops().allreduced_allgather(g, process_set_id=ps)
        out.append(gathered * tf.cast(scale, gathered.dtype))
    return out
