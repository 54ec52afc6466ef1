"""The collectives, with Horovod's names and signatures. Arguments Horovod uses to place work on
devices (device_dense, device_sparse) and ignore_name_scope are accepted and have no effect: the
daemon does the work."""
import zlib

import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Average, Sum
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.ops_library import ops
from allreduced.tensorflow.process_sets import _id, _root, global_process_set


def _resolve_op(average, op):
    if average is not None and op is not None:
        raise ValueError("The op parameter supersedes average; set only one of them.")
    if op is None:
        op = Average if average is None or average else Sum
    return op


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Reduces `tensor` over the ranks of `process_set` (Average by default, like Horovod).
    A tf.IndexedSlices is gathered instead (see _reduce_slices)."""
    op = _resolve_op(average, op)
    ps = _id(process_set)
    if isinstance(tensor, tf.IndexedSlices):
        _check_slices_op(op, prescale_factor, postscale_factor)
        return _reduce_slices([tensor], op, name, process_set, grouped=False)[0]
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = ops().allreduced_allreduce(compressed, reduce_op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         tensor_name=name or "", process_set_id=ps)
    return compression.decompress(reduced, ctx)


# A group's id must agree among the set's ranks: a named group's is derived from its name; an
# unnamed group's (-1 here) from the op's own name, by the kernel, like the tensors' names.
def _group(name):
    if not name:
        return -1, ""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF, name


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """Reduces a list of tensors as one atomic group (negotiated together, like Horovod). The
    tf.IndexedSlices among them are gathered as one group of their own (see _reduce_slices)."""
    op = _resolve_op(average, op)
    tensors = list(tensors)
    sparse_at = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse_at:
        _check_slices_op(op, prescale_factor, postscale_factor)
    dense_at = [i for i in range(len(tensors)) if i not in set(sparse_at)]
    out = [None] * len(tensors)
    dense = _grouped_reducing(ops().allreduced_grouped_allreduce,
                              [tensors[i] for i in dense_at], compression, op, prescale_factor,
                              postscale_factor, name, process_set)
    sparse = _reduce_slices([tensors[i] for i in sparse_at], op,
                            name and f"{name}.sparse", process_set, grouped=True)
    for i, t in zip(dense_at + sparse_at, list(dense) + list(sparse)):
        out[i] = t
    return out


def _check_slices_op(op, prescale_factor, postscale_factor):
    # Raised before anything is submitted, so every rank raises and none waits for the others.
    if op not in (Average, Sum):
        raise NotImplementedError("allreduce of tf.IndexedSlices supports only Sum and Average "
                                  "(pass sparse_as_dense=True to reduce them as dense tensors)")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("prescale_factor and postscale_factor are not supported with "
                                  "tf.IndexedSlices")


def _reduce_slices(slices, op, name, process_set, grouped):
    """Sum or Average of tf.IndexedSlices: their values and indices are gathered from every rank
    (duplicate indices stay, as in Horovod); Average divides the values by the set's size with
    TensorFlow's `/`, so integer values become floating (int8/16 -> float32, int32/64 ->
    float64), as Horovod's do."""
    if not slices:
        return []
    if grouped:
        values = grouped_allgather([s.values for s in slices], name=name and f"{name}.values",
                                   process_set=process_set)
        indices = grouped_allgather([s.indices for s in slices],
                                    name=name and f"{name}.indices", process_set=process_set)
    else:
        values = [allgather(slices[0].values, name=name and f"{name}.values",
                            process_set=process_set)]
        indices = [allgather(slices[0].indices, name=name and f"{name}.indices",
                             process_set=process_set)]
    out = []
    for s, v, i in zip(slices, values, indices):
        if op == Average:
            v = v / tf.cast(process_set.size(), v.dtype)
        out.append(tf.IndexedSlices(v, i, dense_shape=s.dense_shape))
    return out


def _grouped_reducing(op_fn, tensors, compression, op, prescale_factor, postscale_factor,
                      name, process_set):
    """A grouped reducing collective (allreduce or reducescatter) with compression."""
    ps = _id(process_set)
    if not tensors:
        return []
    compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    group, name = _group(name)
    outs = op_fn([c for c, _ in compressed], reduce_op=op, group_id=group,
                 prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                 tensor_name=name, process_set_id=ps)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]


def allgather(tensor, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Concatenates every rank's `tensor` along the first dimension (sizes may differ)."""
    return ops().allreduced_allgather(tf.convert_to_tensor(tensor), tensor_name=name or "",
                                      process_set_id=_id(process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set,
                      ignore_name_scope=False):
    """Allgathers a list of tensors as one atomic group."""
    ps = _id(process_set)
    if not tensors:
        return []
    group, name = _group(name)
    return ops().allreduced_grouped_allgather(
        [tf.convert_to_tensor(t) for t in tensors], group_id=group,
        tensor_name=name, process_set_id=ps)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Every rank gets `root_rank`'s `tensor` (root_rank is a global rank, as in Horovod, also
    with a process set)."""
    ps = _id(process_set)
    return ops().allreduced_broadcast(tf.convert_to_tensor(tensor),
                                      root_rank=_root(process_set, root_rank),
                                      tensor_name=name or "", process_set_id=ps)


def _on_gpu(variable):
    device = getattr(variable, "device", "") or ""
    return bool(device) and tf.DeviceSpec.from_string(device).device_type == "GPU"


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast: every variable takes `root_rank`'s value, written into the variable's
    own buffer by one op. Returns the variables in eager mode and in a tf.function; in a
    tf.compat.v1 graph, tensors whose evaluation runs the broadcast and reads the new values.
    Variables on a GPU (whose buffers the in-place CPU kernel cannot write) and reference
    variables (tf.compat.v1 graphs without resource variables) are broadcast and assigned
    instead, under the same tensor names ("<name>.<index>"), so ranks placing their variables
    differently still agree when the call is named."""
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    ps = _id(process_set)
    if not variables:
        return variables
    root_rank = _root(process_set, root_rank)
    if any(_on_gpu(v) or not hasattr(v, "handle") for v in variables):
        out = [tf.compat.v1.assign(v, ops().allreduced_broadcast(
                   tf.convert_to_tensor(v), root_rank=root_rank,
                   tensor_name=f"{name}.{i}" if name else "", process_set_id=ps))
               for i, v in enumerate(variables)]
    else:
        op = ops().allreduced_broadcast_inplace([v.handle for v in variables],
                                                root_rank=root_rank, tensor_name=name or "",
                                                process_set_id=ps)
        with tf.control_dependencies([op]):
            out = [tf.identity(v.read_value()) for v in variables] if _in_v1_graph() else []
    if not _in_v1_graph():
        out = variables
    return out[0] if single else out


def _in_v1_graph():
    """Building a tf.compat.v1 graph (not eager, not a tf.function): ops run only when fetched."""
    return not tf.executing_eagerly() and not tf.compat.v1.get_default_graph().building_function


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Assigns every variable the value it has on `root_rank`. Each call is its own op, so two
    calls in one tf.function (model variables, then optimizer variables) stay apart. Returns
    the broadcast as an op in a tf.compat.v1 graph, None otherwise."""
    out = broadcast_(list(variables), root_rank, process_set=process_set)
    if _in_v1_graph():
        return tf.group(*out)
    return None


def broadcast_global_variables(root_rank):
    """Broadcasts every tf.compat.v1 global variable from `root_rank` (graph mode only, like
    Horovod's: in eager mode there are no global variables; use broadcast_variables)."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables() does not work in eager mode; use "
                           "broadcast_variables(model.variables, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends rows of `tensor` to every rank (`splits[r]` rows to rank r). With `splits`, returns
    (received tensor, rows received from each rank); without, the first dimension is split
    evenly and only the received tensor is returned, as in Horovod."""
    tensor = tf.convert_to_tensor(tensor)
    given = splits is not None
    splits = tf.cast(splits, tf.int64) if given else tf.zeros([0], tf.int64)
    received, received_splits = ops().allreduced_alltoall(tensor, splits, tensor_name=name or "",
                                                          process_set_id=_id(process_set))
    return (received, received_splits) if given else received


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over all ranks and gives each rank its block of rows (the first
    dim % size ranks get one row more, like Horovod)."""
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    out = ops().allreduced_reducescatter(compressed, reduce_op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         tensor_name=name or "", process_set_id=_id(process_set))
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          name=None, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of tensors as one atomic group."""
    return _grouped_reducing(ops().allreduced_grouped_reducescatter,
                             tensors, compression, op, prescale_factor, postscale_factor, name,
                             process_set)


def barrier(process_set=global_process_set, name=None):
    """Returns once every rank of the set reached the barrier."""
    return ops().allreduced_barrier(tensor_name=name or "barrier",
                                    process_set_id=_id(process_set))


def join(process_set=global_process_set):
    """This rank has no more data: it contributes the identity to other ranks' allreduces until
    every rank joined. Returns the last rank that joined."""
    return int(ops().allreduced_join(tensor_name="join",
                                     process_set_id=_id(process_set)).numpy())
