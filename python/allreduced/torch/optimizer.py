"""Horovod's DistributedOptimizer: wraps a torch.optim.Optimizer so that each parameter's gradient
is allreduced as soon as backward() has accumulated it (a post-accumulate-grad hook starts an
asynchronous allreduce), overlapping communication with the rest of backward; step() waits for
them all (synchronize()) and then applies the wrapped optimizer's update.

Per parameter: after `backward_passes_per_step` backward passes its (locally accumulated)
gradient is reduced; `groups` reduces parameters together as atomic groups; sparse gradients are
gathered (or reduced densely with sparse_as_dense); parameters whose hook never fired in a step
(unused in this rank's forward) are reduced with zero gradients, so every rank submits the same
tensors. op=Adasum reduces the gradients with the daemon's Adasum (Horovod's delta-based Adasum
optimizer is not reproduced)."""
import contextlib
import warnings

import torch

from allreduced.torch import basics
from allreduced.torch.basics import Adasum, Average
from allreduced.torch.collectives import (allreduce_async_, grouped_allreduce_async_,
                                          sparse_allreduce_async, synchronize as wait)
from allreduced.torch.compression import Compression
from allreduced.torch.functions import broadcast_object
from allreduced.torch.process_sets import global_process_set


def _named(optimizer, named_parameters):
    """[(name, parameter)] checked against the optimizer's parameters (Horovod's rules)."""
    all_params = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        return [(f"allreduce.noname.{i}.{j}", p)
                for i, group in enumerate(optimizer.param_groups)
                for j, p in enumerate(group["params"])]
    named = list(named_parameters)
    if any(not isinstance(item, tuple) for item in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [name for name, _ in named]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: "
                         + ", ".join(duplicates))
    unnamed = {id(p) for p in all_params} - {id(p) for _, p in named}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were "
                         "not named. Python object ids: " + ", ".join(map(str, unnamed)))
    return named


def _split(items, n):
    """`items` in `n` consecutive chunks of nearly equal size."""
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [chunk for chunk in out if chunk]


class _DistributedMixin:
    """Placed before the wrapped optimizer's class (see DistributedOptimizer)."""

    def _setup(self, named, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._parameter_names = {p: name for name, p in sorted(named, key=lambda item: item[0])}
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._delay = {p: backward_passes_per_step for p in self._parameter_names}
        self._handles = {}  # parameter or tuple of parameters (a group) -> (handle, ctx)
        self._requires_update = set()
        self._group_of, self._group_ready = {}, {}
        self._synchronized = False
        self._should_synchronize = True
        self._groups = self._check_groups(groups)
        if process_set.included() and basics.size() > 1:
            self._register_hooks()

    @staticmethod
    def _check_groups(groups):
        if groups is None:
            return None
        if not isinstance(groups, list) and not (isinstance(groups, int) and groups > 0):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "torch.Tensor.")
        if isinstance(groups, list):
            seen = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))
        return groups

    def _register_hooks(self):
        trainable = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if self._groups is not None:
            self._form_groups(trainable)
        for p in trainable:
            self._requires_update.add(p)
            p.register_post_accumulate_grad_hook(self._make_hook(p))

    def _form_groups(self, trainable):
        # Rank 0's parameter order, so that every rank forms the same groups.
        order = broadcast_object([self._parameter_names[p] for p in trainable], root_rank=0,
                                 name="DistributedOptimizer.groups",
                                 process_set=self.process_set)
        ordered = sorted(trainable, key=lambda p: order.index(self._parameter_names[p]))
        if isinstance(self._groups, list):
            listed = [[p for p in group if any(p is q for q in ordered)] for group in self._groups]
            in_groups = {id(p) for group in listed for p in group}
            chunks = [g for g in listed if g] + [[p] for p in ordered if id(p) not in in_groups]
        else:
            chunks = _split(ordered, self._groups)
        for chunk in chunks:
            group = tuple(chunk)
            for p in group:
                self._group_of[p] = group
            self._group_ready[group] = 0

    def _make_hook(self, p):
        def hook(*unused):
            if self._handles.get(p, (None,))[0] is not None and self._delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step "
                                     "times before call to step(). Increase "
                                     "backward_passes_per_step to accumulate gradients locally.")
            self._delay[p] -= 1
            if self._delay[p] > 0:
                self._handles[p] = (None, None)
                return
            group = self._group_of.get(p)
            if group is None:
                self._handles[p] = self._reduce_async(p)
                return
            self._group_ready[group] += 1
            if self._group_ready[group] == len(group):
                self._group_ready[group] = 0
                for q in group:
                    self._handles.pop(q, None)
                self._handles[group] = self._reduce_group_async(group)
            else:
                self._handles[p] = (None, None)
        return hook

    def _scales(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _reduce_async(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p.data)
        name = self._parameter_names[p]
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(grad, name, self.op, self.process_set), None
            grad = grad.to_dense()
        compressed, ctx = self._compression.compress(grad)
        prescale, postscale = self._scales()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self.process_set)
        return handle, ctx

    def _reduce_group_async(self, group):
        pairs = [self._compression.compress(p.grad) for p in group]
        prescale, postscale = self._scales()
        handle = grouped_allreduce_async_([c for c, _ in pairs], name=self._parameter_names[group[0]],
                                          op=self.op, prescale_factor=prescale,
                                          postscale_factor=postscale,
                                          process_set=self.process_set)
        return handle, [ctx for _, ctx in pairs]

    def _set_grad(self, p, output, ctx):
        self._delay[p] = self.backward_passes_per_step
        value = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:
            if not value.is_sparse:
                value = value.to_sparse()
            p.grad.zero_().add_(value)
        else:
            p.grad.set_(value.to(p.grad.dtype) if value.dtype != p.grad.dtype else value)

    def synchronize(self):
        """Waits for every gradient's reduction and writes the results into the gradients.
        Parameters whose hook has not fired (or not often enough) are reduced now."""
        if not self.process_set.included():
            self._synchronized = True
            return
        started = set()
        for key in self._handles:
            started.update(key if isinstance(key, tuple) else (key,))
        for p in self._requires_update - started:
            self._handles[p] = self._reduce_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._reduce_async(key)
        for key, (handle, ctx) in self._handles.items():
            if isinstance(key, tuple):
                for p, output, c in zip(key, wait(handle), ctx):
                    self._set_grad(p, output, c)
                self._group_ready[key] = 0
            else:
                self._set_grad(key, handle() if callable(handle) else wait(handle), ctx)
                group = self._group_of.get(key)
                if group is not None:
                    self._group_ready[group] = 0
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this context does not synchronize (after an explicit synchronize(),
        e.g. to clip the reduced gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def _local_step(self, closure=None):
        """The wrapped optimizer's own step, without any reduction."""
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super().zero_grad(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        return super().load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """`optimizer` (a torch.optim.Optimizer) as a distributed one: an instance of a subclass of
    its class, over the same parameter groups (Horovod's constructor; see the module doc)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed",
                      DeprecationWarning)
        groups = groups if groups is not None else num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == Adasum and process_set is not global_process_set:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    named = _named(optimizer, named_parameters)
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base), {})
    distributed = cls(optimizer.param_groups)  # the groups carry every option's value
    distributed._setup(named, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return distributed
