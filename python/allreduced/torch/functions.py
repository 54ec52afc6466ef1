"""Horovod's helpers on top of the collectives: broadcast_parameters, broadcast_optimizer_state,
broadcast_object, allgather_object. Objects are pickled (cloudpickle when installed, so lambdas
travel too) into uint8 tensors; their lengths travel first."""
import collections
import io
import pickle

import torch

from allreduced.torch import basics
from allreduced.torch.autograd import allgather, broadcast_
from allreduced.torch.collectives import broadcast_async_, synchronize
from allreduced.torch.process_sets import global_process_set

try:
    import cloudpickle as _pickler
except ImportError:  # plain pickle: everything but lambdas and local classes
    _pickler = pickle


def _to_tensor(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _from_tensor(tensor):
    return pickle.loads(tensor.numpy().tobytes())


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Gives every rank `root_rank`'s parameters, in place: `params` is a dict (a state_dict; sent
    in sorted key order, each under its key) or a list of tensors or (name, tensor) pairs."""
    if isinstance(params, dict):
        pairs = sorted(params.items())
    elif isinstance(params, list):
        pairs = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    pending = [broadcast_async_(p, root_rank, name, process_set) for name, p in pairs]
    for handle in pending:
        synchronize(handle)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """`root_rank`'s `obj` on every rank (any picklable object)."""
    name = name or type(obj).__name__
    is_root = basics.rank() == root_rank  # a rank of the job, as in Horovod
    data = _to_tensor(obj) if is_root else None
    length = torch.tensor([data.numel() if is_root else 0], dtype=torch.int64)
    broadcast_(length, root_rank, f"{name}.sz", process_set)
    if not is_root:
        data = torch.zeros(int(length[0]), dtype=torch.uint8)
    broadcast_(data, root_rank, f"{name}.t", process_set)
    return obj if is_root else _from_tensor(data)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj`, in rank order."""
    name = name or type(obj).__name__
    data = _to_tensor(obj)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name=f"{name}.sz",
                      process_set=process_set).tolist()
    gathered = allgather(data, name=f"{name}.t", process_set=process_set)
    out, offset = [], 0
    for n in sizes:
        out.append(_from_tensor(gathered[offset:offset + n]))
        offset += n
    return out


def _ensure_state(optimizer, model):
    """An optimizer that has not stepped yet has no state to send: step it once with zero
    gradients (sparse ones where the optimizer or the model's embeddings need them)."""
    sparse_ids = set()
    if model is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.sparse:
                sparse_ids.update(id(p) for p in module.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p.data)
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse_ids):
                    p.grad = p.grad.to_sparse()
    # A DistributedOptimizer steps without reducing these zero gradients.
    getattr(optimizer, "_local_step", optimizer.step)()


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Gives every rank `root_rank`'s optimizer state: tensors by in-place broadcast, the
    options and scalar state (learning rate, step counts, ...) as one pickled object."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state = optimizer.state_dict()
    if not state["state"]:
        _ensure_state(optimizer, model)
        state = optimizer.state_dict()
    if not state["state"]:
        return
    tensors, scalars, setters = [], {}, {}
    seen = collections.Counter()
    for index, group in enumerate(state["param_groups"]):
        for option, value in group.items():
            if option != "params":
                key = f"{option}.{index}"
                scalars[key] = value
                setters[key] = (lambda i, o: lambda v: optimizer.param_groups[i].__setitem__(
                    o, v))(index, option)
        for pid in group["params"]:
            for entry, value in state["state"].get(pid, {}).items():
                seen[entry] += 1
                key = f"{entry}.{seen[entry]}"
                if torch.is_tensor(value):
                    tensors.append((key, value))
                else:
                    scalars[key] = value
                    setters[key] = (lambda p, e: lambda v: state["state"][p].__setitem__(
                        e, v))(pid, entry)
    broadcast_parameters(tensors, root_rank, process_set)
    for key, value in broadcast_object(scalars, root_rank, process_set=process_set).items():
        setters[key](value)  # state_dict()'s per-parameter dicts are the optimizer's own
