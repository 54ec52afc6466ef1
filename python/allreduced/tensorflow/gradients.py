"""Gradients of the collectives, as Horovod defines them, registered with TensorFlow.

Their collectives are named after the forward op (_grad_name), not by the graph's own naming of
gradient ops ("gradients_3/..._grad/..."), which counts every earlier gradient computation in the
graph and so differs between ranks that computed other gradients before."""
import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Average, Sum
from allreduced.tensorflow.ops_library import ops


def _set_rank_and_size(op):
    ps = op.get_attr("process_set_id")
    process_set = basics.process_set_registry.get(ps)
    return process_set.rank(), process_set.size(), ps


def _grad_name(op, part):
    """"<forward name>.grad.<part>", made unique within the graph being built (a forward op may
    be differentiated more than once) outside any name scope. An unnamed forward op seen only
    through the tape (eager mode, or a tape inside a tf.function: no op name) gives "": the
    kernel then uses its own op's name (the op type in eager mode, a node name of the function's
    graph, which starts afresh at each trace)."""
    base = op.get_attr("tensor_name")
    if not base and not tf.executing_eagerly():
        base = getattr(op, "name", "")
    if not base:
        return ""
    if tf.executing_eagerly():
        return f"{base}.grad.{part}"
    graph = tf.compat.v1.get_default_graph()
    with graph.name_scope(None):
        return graph.unique_name(f"{base}.grad.{part}")


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
                                      tensor_name=_grad_name(op, "sum"),
                                      process_set_id=op.get_attr("process_set_id"))


@tf.RegisterGradient("AllreducedGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return [ops().allreduced_allreduce(g, reduce_op=op.get_attr("reduce_op"),
                                       prescale_factor=op.get_attr("prescale_factor"),
                                       postscale_factor=op.get_attr("postscale_factor"),
                                       tensor_name=_grad_name(op, f"sum.{i}"),
                                       process_set_id=op.get_attr("process_set_id"))
            for i, g in enumerate(grads)]


def _gather_grad(op, part, input_rows, grad, rank, ps):
    # Average the gradient over ranks (Horovod's convention), then each rank keeps the rows it
    # contributed.
    summed = ops().allreduced_allreduce(grad, reduce_op=Average,
                                        tensor_name=_grad_name(op, part), process_set_id=ps)
    all_rows = ops().allreduced_allgather(tf.reshape(input_rows, [1]),
                                          tensor_name=_grad_name(op, f"{part}.rows"),
                                          process_set_id=ps)
    start = tf.cumsum(all_rows, exclusive=True)[rank]
    return summed[start:start + input_rows]


@tf.RegisterGradient("AllreducedAllgather")
def _allgather_grad(op, grad):
    rank, _, ps = _set_rank_and_size(op)
    return _gather_grad(op, "sum", tf.shape(op.inputs[0])[0], grad, rank, ps)


@tf.RegisterGradient("AllreducedGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    rank, _, ps = _set_rank_and_size(op)
    return [_gather_grad(op, f"sum.{i}", tf.shape(x)[0], g, rank, ps)
            for i, (x, g) in enumerate(zip(op.inputs, grads))]


@tf.RegisterGradient("AllreducedBroadcast")
def _broadcast_grad(op, grad):
    # The root receives the average of every rank's gradient (Horovod's convention), the others
    # zero.
    rank, _, ps = _set_rank_and_size(op)
    summed = ops().allreduced_allreduce(grad, reduce_op=Average,
                                        tensor_name=_grad_name(op, "sum"), process_set_id=ps)
    return summed * tf.cast(1 if rank == op.get_attr("root_rank") else 0, summed.dtype)


@tf.RegisterGradient("AllreducedAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    # Rows travel back where they came from: an alltoall of the gradient with the received splits.
    back, _ = ops().allreduced_alltoall(grad, op.outputs[1], tensor_name=_grad_name(op, "back"),
                                        process_set_id=op.get_attr("process_set_id"))
    return back, None


@tf.RegisterGradient("AllreducedReducescatter")
def _reducescatter_grad(op, grad):
    # Each rank's input row i fed the output block holding row i: gather the blocks' gradients.
    gathered = ops().allreduced_allgather(grad, tensor_name=_grad_name(op, "gather"),
                                          process_set_id=op.get_attr("process_set_id"))
    return gathered * tf.cast(_reducescatter_scale(op), gathered.dtype)


@tf.RegisterGradient("AllreducedGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    scale = _reducescatter_scale(op)
    ps = op.get_attr("process_set_id")
    out = []
    for i, g in enumerate(grads):
        gathered = ops().allreduced_allgather(g, tensor_name=_grad_name(op, f"gather.{i}"),
                                              process_set_id=ps)
        out.append(gathered * tf.cast(scale, gathered.dtype))
    return out
