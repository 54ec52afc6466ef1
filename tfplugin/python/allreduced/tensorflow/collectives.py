"""The collectives, with Horovod's names and signatures. Arguments Horovod uses to place work on
devices (device_dense, device_sparse) and ignore_name_scope are accepted and have no effect: the
daemon does the work."""
import zlib

import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Average, Sum
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.ops_library import ops
from allreduced.tensorflow.process_sets import _id, global_process_set


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
    A tf.IndexedSlices is gathered instead (values and indices, two allgathers), its values divided
    by the set's size for Average."""
    op = _resolve_op(average, op)
    ps = _id(process_set)
    if isinstance(tensor, tf.IndexedSlices):
        if op not in (Average, Sum):
            raise NotImplementedError("allreduce of tf.IndexedSlices supports only Sum and Average")
        prefix = name or "IndexedSlices"
        values = allgather(tensor.values, name=f"{prefix}.values", process_set=process_set)
        indices = allgather(tensor.indices, name=f"{prefix}.indices", process_set=process_set)
        scale = prescale_factor * postscale_factor
        if op == Average:
            scale /= process_set.size()
        if scale != 1.0:
            values = values * tf.cast(scale, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = ops().allreduced_allreduce(compressed, reduce_op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         tensor_name=name or "", process_set_id=ps)
    return compression.decompress(reduced, ctx)


# A group's id must agree among the set's ranks: it is derived from the group's name, so a
# tf.function retraced on one rank only still agrees. Unnamed groups are numbered in call order per
# process set (every rank makes its grouped calls in the same order).
_group_counters = {}


def _group(ps, name, kind):
    if not name:
        _group_counters[ps] = _group_counters.get(ps, 0) + 1
        name = f"{kind}.{_group_counters[ps]}"
    return zlib.crc32(name.encode()) & 0x7FFFFFFF, name


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """Reduces a list of tensors as one atomic group (negotiated together, like Horovod)."""
    return _grouped_reducing("grouped_allreduce", ops().allreduced_grouped_allreduce, tensors,
                             compression, _resolve_op(average, op), prescale_factor,
                             postscale_factor, name, process_set)


def _grouped_reducing(kind, op_fn, tensors, compression, op, prescale_factor, postscale_factor,
                      name, process_set):
    """A grouped reducing collective (allreduce or reducescatter) with compression."""
    ps = _id(process_set)
    if not tensors:
        return []
    compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    group, name = _group(ps, name, kind)
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
    group, name = _group(ps, name, "grouped_allgather")
    return ops().allreduced_grouped_allgather(
        [tf.convert_to_tensor(t) for t in tensors], group_id=group,
        tensor_name=name, process_set_id=ps)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Every rank gets `root_rank`'s `tensor` (root_rank counts within the process set)."""
    return ops().allreduced_broadcast(tf.convert_to_tensor(tensor), root_rank=root_rank,
                                      tensor_name=name or "", process_set_id=_id(process_set))


def _on_gpu(variable):
    device = getattr(variable, "device", "") or ""
    return bool(device) and tf.DeviceSpec.from_string(device).device_type == "GPU"


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast: every variable takes `root_rank`'s value, written into the variable's
    own buffer by one op. Returns the variables. Variables on a GPU (whose buffers the in-place
    CPU kernel cannot write) are broadcast and assigned instead, under the same tensor names
    ("<name>.<index>"), so ranks placing their variables differently still agree."""
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    name = name or "broadcast_"
    if any(_on_gpu(v) for v in variables):
        for i, v in enumerate(variables):
            v.assign(ops().allreduced_broadcast(v.read_value(), root_rank=root_rank,
                                                tensor_name=f"{name}.{i}",
                                                process_set_id=_id(process_set)))
    elif variables:
        ops().allreduced_broadcast_inplace([v.handle for v in variables], root_rank=root_rank,
                                           tensor_name=name, process_set_id=_id(process_set))
    return variables[0] if single else variables


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Assigns every variable the value it has on `root_rank`."""
    broadcast_(list(variables), root_rank, name="broadcast_variables", process_set=process_set)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends rows of `tensor` to every rank (`splits[r]` rows to rank r; even split when None);
    returns (received tensor, rows received from each rank)."""
    tensor = tf.convert_to_tensor(tensor)
    splits = tf.zeros([0], tf.int64) if splits is None else tf.cast(splits, tf.int64)
    return ops().allreduced_alltoall(tensor, splits, tensor_name=name or "",
                                     process_set_id=_id(process_set))


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over all ranks and gives each rank its block of rows (the first
    dim % size ranks get one row more, like Horovod)."""
    _check_op(op)
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
    _check_op(op)
    return _grouped_reducing("grouped_reducescatter", ops().allreduced_grouped_reducescatter,
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
