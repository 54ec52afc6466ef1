"""The synchronous collectives as autograd functions, Horovod's names and gradients:
allreduce -> allreduce of the gradient with the same op and scales; allgather -> this rank's rows
of the averaged gradient; broadcast -> the averaged gradient on the root, zero elsewhere;
alltoall -> the gradient sent back along the received splits; reducescatter -> the gradient
gathered (scaled as the forward reduction was)."""
import torch

from allreduced.torch import basics
from allreduced.torch import collectives as c
from allreduced.torch.basics import Sum
from allreduced.torch.compression import Compression
from allreduced.torch.process_sets import global_process_set


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale, postscale, process_set):
        ctx.args = (average, op, prescale, postscale, process_set)
        return c.synchronize(c.allreduce_async(tensor, average, name, op, prescale, postscale,
                                               process_set))

    @staticmethod
    def backward(ctx, grad):
        average, op, prescale, postscale, process_set = ctx.args
        return (allreduce(grad, average=average, op=op, prescale_factor=prescale,
                          postscale_factor=postscale, process_set=process_set),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """`tensor` reduced over the set's ranks (Average by default); differentiable."""
    compressed, state = compression.compress(tensor)
    out = _Allreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor,
                           process_set)
    return compression.decompress(out, state)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In place; returns `tensor`."""
    return c.synchronize(c.allreduce_async_(tensor, average, name, op, prescale_factor,
                                            postscale_factor, process_set))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (average, op, prescale, postscale, process_set)
        return tuple(c.synchronize(c.grouped_allreduce_async(
            list(tensors), average, name, op, prescale, postscale, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        average, op, prescale, postscale, process_set = ctx.args
        reduced = grouped_allreduce(list(grads), average=average, op=op,
                                    prescale_factor=prescale, postscale_factor=postscale,
                                    process_set=process_set)
        return (None,) * 6 + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A list of tensors reduced as one atomic group; differentiable."""
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                   process_set, *[p for p, _ in pairs])
    return [compression.decompress(o, state) for o, (_, state) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return c.synchronize(c.grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                    postscale_factor, process_set))


def _my_rows(grads, rows, process_set):
    """This rank's slice of each gathered gradient (its rows start after lower ranks' rows)."""
    reduced = grouped_allreduce(list(grads), op=basics.Average, process_set=process_set)
    counts = grouped_allgather([torch.tensor([n], dtype=torch.int64) for n in rows],
                               process_set=process_set)
    me = process_set.rank()
    return [g.narrow(0, int(n[:me].sum()), r) for g, n, r in zip(reduced, counts, rows)]


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return c.synchronize(c.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        return _my_rows([grad], [ctx.rows], ctx.process_set)[0], None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension; differentiable."""
    return _Allgather.apply(tensor, name, process_set)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(c.synchronize(c.grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(_my_rows(grads, ctx.rows, ctx.process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    if not tensors:
        return []
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return c.synchronize(c.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=basics.Average, process_set=ctx.process_set)
        if basics.rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """`root_rank`'s `tensor` on every rank; differentiable."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In place; returns `tensor`."""
    return c.synchronize(c.broadcast_async_(tensor, root_rank, name, process_set))


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = c.synchronize(c.alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, *unused):
        back, _ = alltoall(grad, splits=ctx.received, process_set=ctx.process_set)
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows of `tensor` sent to every rank; with `splits`, (received, received splits), without
    them the received tensor only, as in Horovod; differentiable."""
    return _Alltoall.apply(tensor, splits, name, process_set)


def _reducescatter_grad_scale(ctx, grads):
    factor = ctx.prescale * ctx.postscale
    if ctx.op == Sum:
        factor *= ctx.process_set.size()
    return [g * factor if factor != 1.0 else g for g in grads]


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.op, ctx.process_set, ctx.prescale, ctx.postscale = op, process_set, prescale, postscale
        return c.synchronize(c.reducescatter_async(tensor, name, op, process_set, prescale,
                                                   postscale))

    @staticmethod
    def backward(ctx, grad):
        scaled = _reducescatter_grad_scale(ctx, [grad])[0]
        return allgather(scaled, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=basics.Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """`tensor` reduced over the set, this rank's block of rows; differentiable."""
    compressed, state = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                               postscale_factor)
    return compression.decompress(out, state)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.op, ctx.process_set, ctx.prescale, ctx.postscale = op, process_set, prescale, postscale
        return tuple(c.synchronize(c.grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        scaled = _reducescatter_grad_scale(ctx, grads)
        return (None,) * 5 + tuple(grouped_allgather(scaled, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=basics.Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                       *[p for p, _ in pairs])
    return [compression.decompress(o, state) for o, (_, state) in zip(outs, pairs)]
