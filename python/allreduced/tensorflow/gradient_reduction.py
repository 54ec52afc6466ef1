"""Reducing a list of gradients over the ranks: shared by DistributedGradientTape, the Keras
DistributedOptimizer and the tf.compat.v1 DistributedOptimizer. Dense gradients go as one grouped
allreduce (one op: every tensor is submitted before any is awaited, and the daemon fuses them);
tf.IndexedSlices as two allgathers unless sparse_as_dense."""
import tensorflow as tf

from allreduced.tensorflow.basics import Average, Sum
from allreduced.tensorflow.collectives import allreduce, grouped_allreduce


def reduce_gradients(grads, variables=None, compression=None, op=Average,
                     gradient_predivide_factor=1.0, sparse_as_dense=False, process_set=None,
                     local_variables=(), scale_local_gradients=True, name="gradients"):
    """Returns `grads` (a list; None entries stay None) reduced over `process_set` (unchanged on a
    rank outside it). Gradients of
    `local_variables` (by identity with `variables`) are not reduced; with scale_local_gradients
    they are divided by the set's size, so they keep the scale of the averaged ones."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor requires op=Average")
    if process_set is not None and not process_set.included():
        return list(grads)  # a rank outside the set keeps its own gradients, as in Horovod
    size = process_set.size()
    local_ids = {id(v) for v in local_variables}
    out = list(grads)
    dense, dense_at = [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if variables is not None and id(variables[i]) in local_ids:
            out[i] = _divide(g, size) if scale_local_gradients else g
            continue
        if isinstance(g, tf.IndexedSlices):
            if not sparse_as_dense:
                # Gathered, not summed: the predivide factor and its inverse would cancel.
                out[i] = allreduce(g, op=op, name=f"{name}.sparse.{i}", process_set=process_set)
                continue
            g = tf.convert_to_tensor(g)
        dense.append(tf.convert_to_tensor(g))
        dense_at.append(i)
    if dense:
        if gradient_predivide_factor != 1.0:
            reduce_op, pre = Sum, 1.0 / gradient_predivide_factor
            post = gradient_predivide_factor / size
        else:
            reduce_op, pre, post = op, 1.0, 1.0
        reduced = grouped_allreduce(dense, op=reduce_op, compression=compression,
                                    prescale_factor=pre, postscale_factor=post,
                                    name=name, process_set=process_set)
        for i, r in zip(dense_at, reduced):
            out[i] = r
    return out


def _divide(grad, size):
    if isinstance(grad, tf.IndexedSlices):  # an embedding's gradient stays sparse
        return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
    return grad / size
