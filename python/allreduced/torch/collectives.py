"""The asynchronous collectives with Horovod's names and signatures (allreduce_async,
allreduce_async_, grouped_*, allgather_async, broadcast_async(_), alltoall_async,
reducescatter_async, sparse_allreduce_async), join, barrier, poll and synchronize. Each *_async
call submits at once and returns a handle; synchronize(handle) waits and returns the output.
Tensors on other devices or not contiguous are staged through contiguous host copies."""
import warnings

import torch

from allreduced.common.client_library import constants
from allreduced.torch import basics
from allreduced.torch.basics import Adasum, Average, Max, Min, Product, Sum
from allreduced.torch.process_sets import global_process_set, process_set_id
from allreduced.torch.requests import (Operation, copy_result, group_id, handles,
                                       received_splits, submit)

_C = constants()
ALLREDUCE, ALLGATHER, BROADCAST = _C["ARD_ALLREDUCE"], _C["ARD_ALLGATHER"], _C["ARD_BROADCAST"]
ALLTOALL, REDUCESCATTER = _C["ARD_ALLTOALL"], _C["ARD_REDUCESCATTER"]
BARRIER, JOIN = _C["ARD_BARRIER"], _C["ARD_JOIN"]


def resolve_op(op, average):
    """Horovod's `average` (deprecated) and `op` arguments as one reduce op (Average default)."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    return Average if op is None else op


def _check_adasum(op, process_set):
    if op != Adasum:
        return
    if process_set is not global_process_set:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    size = basics.size()
    if size & (size - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")


def _start(kind, tensors, outputs, name, process_set, finish_one, **params):
    """Submits one request per tensor (a group when `kind` starts with "grouped_") and returns
    the handle whose synchronize() runs finish_one(result, output) per tensor."""
    conn = basics.connection(process_set_id(process_set))
    name = conn.auto_name(kind, name)
    grouped = kind.startswith("grouped_")
    group = (group_id(name), len(tensors)) if grouped else (-1, 0)
    submitted = []
    try:
        for i, tensor in enumerate(tensors):
            tensor_name = f"{name}.{i}" if grouped else name
            submitted.append((submit(conn, tensor=tensor, name=tensor_name, group=group,
                                     **params), tensor_name))
    except Exception:
        # A partly submitted group cannot complete; its results are dropped when they come.
        for handle, tensor_name in submitted:
            conn.forget_name(tensor_name)
        raise

    def finish(results):
        out = [finish_one(r, o) for r, o in zip(results, outputs)]
        return out if grouped else out[0]
    return handles.add(Operation(conn, submitted, finish))


def _into(result, output):
    copy_result(result, output)
    return output


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over the set's ranks into a new tensor; the handle."""
    return _allreduce_async(tensor, tensor.new(tensor.shape), average, name, op, prescale_factor,
                            postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In place: synchronize() writes the result into `tensor` and returns it."""
    return _allreduce_async(tensor, tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def _allreduce_async(tensor, output, average, name, op, prescale, postscale, process_set):
    op = resolve_op(op, average)
    _check_adasum(op, process_set)
    return _start("allreduce", [tensor], [output], name, process_set, _into,
                  collective=ALLREDUCE, reduce_op=op, prescale=prescale, postscale=postscale)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one atomic group (negotiated together)."""
    return _grouped_allreduce_async(tensors, [t.new(t.shape) for t in tensors], average, name,
                                    op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, list(tensors), average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def _grouped_allreduce_async(tensors, outputs, average, name, op, prescale, postscale,
                             process_set):
    op = resolve_op(op, average)
    _check_adasum(op, process_set)
    return _start("grouped_allreduce", list(tensors), outputs, name, process_set, _into,
                  collective=ALLREDUCE, reduce_op=op, prescale=prescale, postscale=postscale)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension (sizes may differ)."""
    return _start("allgather", [tensor], [tensor.new()], name, process_set, _into,
                  collective=ALLGATHER)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _start("grouped_allgather", list(tensors), [t.new() for t in tensors], name,
                  process_set, _into, collective=ALLGATHER)


def _root_in_set(root_rank, process_set):
    """Horovod's root_rank is a rank of the job; the daemon's counts within the set's sub-job."""
    if process_set is global_process_set or process_set is None:
        return root_rank
    if root_rank not in process_set.ranks:
        raise ValueError(f"broadcast root rank {root_rank} is not a member of {process_set}")
    return process_set.ranks.index(root_rank)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Every rank gets `root_rank`'s `tensor` (root_rank: a rank of the job, as in Horovod)."""
    return _start("broadcast", [tensor], [tensor.new(tensor.shape)], name, process_set, _into,
                  collective=BROADCAST, root_rank=_root_in_set(root_rank, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _start("broadcast", [tensor], [tensor], name, process_set, _into,
                  collective=BROADCAST, root_rank=_root_in_set(root_rank, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends `splits[r]` rows of `tensor` to rank r (even split without `splits`);
    synchronize() returns (received tensor, rows received from each rank)."""
    set_size = process_set.size()
    rows = tensor.shape[0] if tensor.dim() else 1
    if splits is None:
        if rows % set_size:
            raise ValueError(f"alltoall: the first dimension ({rows}) must be a multiple of the "
                             f"number of ranks ({set_size}) when no splits are given")
        split_list = None
    else:
        if isinstance(splits, torch.Tensor):
            if splits.dtype.is_floating_point or splits.dtype.is_complex:
                raise ValueError("alltoall: splits must contain integers (torch.int32)")
            split_list = [int(s) for s in splits.flatten().tolist()]
        else:
            split_list = [int(s) for s in splits]
        if len(split_list) != set_size or any(s < 0 for s in split_list):
            raise ValueError(f"alltoall: splits needs {set_size} non-negative entries, one per "
                             f"rank: {split_list}")
        if sum(split_list) > rows:
            raise ValueError(f"alltoall: splits sum to {sum(split_list)}, more than the first "
                             f"dimension ({rows})")

    def finish(result, output):
        copy_result(result, output)
        return output, received_splits(result)
    return _start("alltoall", [tensor], [tensor.new()], name, process_set, finish,
                  collective=ALLTOALL, splits=split_list)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and gives each rank its block of rows (the first
    dim % size ranks get one row more)."""
    _check_reducescatter(op, [tensor])
    return _start("reducescatter", [tensor], [tensor.new()], name, process_set, _into,
                  collective=REDUCESCATTER, reduce_op=op, prescale=prescale_factor,
                  postscale=postscale_factor)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    _check_reducescatter(op, tensors)
    return _start("grouped_reducescatter", list(tensors), [t.new() for t in tensors], name,
                  process_set, _into, collective=REDUCESCATTER, reduce_op=op,
                  prescale=prescale_factor, postscale=postscale_factor)


def _check_reducescatter(op, tensors):
    # Refused before anything is submitted, so every rank raises and none waits for the others.
    if op not in (Average, Sum, Min, Max, Product):
        raise NotImplementedError("reducescatter supports Sum, Average, Min, Max and Product")
    if any(t.dim() == 0 for t in tensors):
        raise ValueError("reducescatter needs tensors of rank 1 or more (got a scalar)")



def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Sum or Average of a sparse COO tensor: every rank's indices and values are gathered
    (duplicates stay, as in Horovod). Returns a function that waits and returns the result."""
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(),
                              name=f"{name}.indices", process_set=process_set)
    values = allgather_async(t._values(), name=f"{name}.values", process_set=process_set)

    def handle():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices).transpose(0, 1)
        if op == Average:
            gathered_values = gathered_values / process_set.size()
        elif op != Sum:
            raise NotImplementedError("sparse allreduce supports only Sum and Average")
        return torch.sparse_coo_tensor(gathered_indices, gathered_values, t.size())
    return handle


def join(device=-1):
    """This rank has no more data: it contributes the identity to the other ranks' allreduces
    until every rank joined. Returns the last rank that joined. `device` is accepted (Horovod
    makes its zero tensors there); the daemon needs none."""
    conn = basics.connection(0)
    handle = submit(conn, JOIN, "join")
    return handles_wait(conn, handle, "join", lambda result: result.join_last_rank)


def barrier(process_set=global_process_set):
    """Returns once every rank of the set reached the barrier."""
    conn = basics.connection(process_set_id(process_set))
    name = conn.auto_name("barrier", None)
    handle = submit(conn, BARRIER, name)
    handles_wait(conn, handle, name, lambda result: None)


def handles_wait(conn, handle, name, finish):
    return Operation(conn, [(handle, name)], lambda results: finish(results[0])).wait()


def poll(handle):
    """True when the op of `handle` completed (synchronize() then returns without blocking)."""
    return handles.poll(handle)


def synchronize(handle):
    """Waits for the op of `handle` and returns its output (None for an unknown handle)."""
    return handles.synchronize(handle)


def allgather_sizes(value, name):
    """Every rank's integer `value`, in rank order (init's host sizes, process sets' hosts)."""
    out = synchronize(allgather_async(torch.tensor([value], dtype=torch.int64), name=name))
    return [int(v) for v in out.tolist()]


basics._hooks["allgather_sizes"] = allgather_sizes
