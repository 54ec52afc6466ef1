"""AllreducedBackend: a c10d Backend whose collectives are requests to the host's daemon.

Each process group is one daemon job (rendezvous.py names it through torch's store) reached
through one client connection. c10d requires every rank to issue a group's collectives in the
same order, so a per-group sequence number names each request ("c10d.<n>"); a call on a list of
tensors is one atomic group of requests ("c10d.<n>.<i>"). Tensors are CPU tensors; a call that
the daemon cannot serve (a reduce op it lacks, a dtype it lacks) raises before it takes a
sequence number, on every rank alike.

How each c10d collective maps onto the daemon's:
  allreduce, allreduce_coalesced, reduce -> ALLREDUCE (in place);  broadcast -> BROADCAST;
  allgather (+ into-tensor forms)        -> ALLGATHER of flattened inputs, split per rank;
  reduce_scatter (+ tensor forms)        -> REDUCESCATTER of the inputs stacked as [size, -1];
  alltoall, all_to_all_single            -> ALLTOALL with per-rank splits;  barrier -> BARRIER.
"""
import atexit

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as C10dBackend
from torch._C._distributed_c10d import ReduceOp

from allreduced.common.client_library import Client, ClientError
from allreduced.common.exceptions import HorovodInternalError
from allreduced.torch import basics
from allreduced.torch.c10d import rendezvous
from allreduced.torch.c10d.work import Completer, Work
from allreduced.torch.collectives import (ALLGATHER, ALLREDUCE, ALLTOALL, BARRIER, BROADCAST,
                                          REDUCESCATTER)
from allreduced.torch.requests import (Operation, copy_result, group_id, host_contiguous,
                                       submit, wire_dtype)

_REDUCE_OPS = {ReduceOp.SUM: basics.Sum, ReduceOp.AVG: basics.Average,
               ReduceOp.PRODUCT: basics.Product, ReduceOp.MIN: basics.Min,
               ReduceOp.MAX: basics.Max}


def _reduce_op(opts):
    op = _REDUCE_OPS.get(opts.reduceOp.op)
    if op is None:
        raise ValueError(f"allreduced backend: reduce op {opts.reduceOp.op} is not supported "
                         "(SUM, AVG, PRODUCT, MIN and MAX are)")
    return op


def _check_cpu(tensors):
    for tensor in tensors:
        if tensor.device.type != "cpu":
            raise ValueError(f"allreduced backend: tensors must be on the CPU, got {tensor.device}")
        wire_dtype(tensor)  # ValueError for a dtype the daemon lacks


def _flat(tensor):
    return host_contiguous(tensor).reshape(-1)


def _copy_into(flat_values, output):
    output.copy_(flat_values.reshape(output.shape))


class AllreducedBackend(C10dBackend):
    """One process group on the daemons (see the module docstring)."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        job = rendezvous.job_name(store, rank)
        local_rank, local_size = rendezvous.local_placement(store, rank, size)
        try:
            client = Client(job, rank, size, local_rank, local_size)
        except ClientError as error:
            raise RuntimeError(f"allreduced backend: cannot join job {job}: {error}") from None
        self._conn = basics.Connection(client)
        self._sequence = 0
        self._completer = Completer(f"allreduced-c10d-{job}")
        # A script that never destroys its group still leaves the job cleanly at exit, so the
        # daemon does not take its end for a crash.
        atexit.register(self.shutdown)

    def getBackendName(self):
        return "allreduced"

    # -- the collectives ------------------------------------------------------------------------

    def allreduce(self, tensors, opts):
        _check_cpu(tensors)
        return self._run("allreduce", tensors, [host_contiguous(t) for t in tensors],
                         self._results_into(tensors), collective=ALLREDUCE,
                         reduce_op=_reduce_op(opts))

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        """The root gets the reduction; the others get it too (c10d leaves theirs unspecified)."""
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        _check_cpu(tensors)
        return self._run("broadcast", tensors, [host_contiguous(t) for t in tensors],
                         self._results_into(tensors), collective=BROADCAST,
                         root_rank=opts.rootRank)

    def allgather(self, output_lists, inputs, opts):
        _check_cpu(inputs)
        outputs = [t for outs in output_lists for t in outs]

        def finish(results):
            for result, outs in zip(results, output_lists):
                gathered = self._result(result, outs[0].dtype).reshape(len(outs), -1)
                for r, out in enumerate(outs):
                    _copy_into(gathered[r], out)
            return outputs
        return self._run("allgather", outputs, [_flat(t) for t in inputs], finish,
                         collective=ALLGATHER)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        _check_cpu(inputs)

        def finish(results):
            for result, out in zip(results, outputs):
                _copy_into(self._result(result, out.dtype), out)
            return outputs
        return self._run("allgather", outputs, [_flat(t) for t in inputs], finish,
                         collective=ALLGATHER)

    def _allgather_base(self, output, input, opts):
        return self.allgather_into_tensor_coalesced([output], [input], opts)

    all_gather_single = _allgather_base

    def reduce_scatter(self, outputs, input_lists, opts):
        _check_cpu(outputs)
        stacked = [torch.cat([_flat(t) for t in inputs]) for inputs in input_lists]
        return self._reduce_scatter(outputs, stacked, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        _check_cpu(inputs)
        return self._reduce_scatter(outputs, [_flat(t) for t in inputs], opts)

    def _reduce_scatter_base(self, output, input, opts):
        return self.reduce_scatter_tensor_coalesced([output], [input], opts)

    reduce_scatter_single = _reduce_scatter_base

    def _reduce_scatter(self, outputs, flat_inputs, opts):
        size = self.size()
        for out, flat in zip(outputs, flat_inputs):
            if flat.numel() != size * out.numel():
                raise ValueError(f"allreduced backend: reduce_scatter input of {flat.numel()} "
                                 f"elements for {size} outputs of {out.numel()}")

        def finish(results):
            for result, out in zip(results, outputs):
                _copy_into(self._result(result, out.dtype), out)
            return outputs
        return self._run("reduce_scatter", outputs, [f.reshape(size, -1) for f in flat_inputs],
                         finish, collective=REDUCESCATTER, reduce_op=_reduce_op(opts))

    def alltoall(self, outputs, inputs, opts):
        _check_cpu(inputs)
        flat = torch.cat([_flat(t) for t in inputs])

        def finish(results):
            received = self._result(results[0], outputs[0].dtype)
            for out, part in zip(outputs, received.split([o.numel() for o in outputs])):
                _copy_into(part, out)
            return outputs
        return self._run("alltoall", outputs, [flat], finish, collective=ALLTOALL,
                         splits=[t.numel() for t in inputs])

    def all_to_all_single(self, output, input, output_splits, input_splits, opts):
        _check_cpu([input])
        data = host_contiguous(input)
        rows = data.shape[0] if data.dim() else 1
        splits = list(input_splits) or [rows // self.size()] * self.size()

        def finish(results):
            _copy_into(self._result(results[0], output.dtype), output)
            return [output]
        return self._run("alltoall", [output], [data], finish, collective=ALLTOALL,
                         splits=splits)

    alltoall_base = all_to_all_single

    def barrier(self, opts):
        return self._run("barrier", [], [None], lambda results: [], collective=BARRIER)

    # -- requests -------------------------------------------------------------------------------

    def _run(self, kind, outputs, inputs, finish, **params):
        """Submits one request per input (a group when there are several) named by the next
        sequence number, and returns the Work that the completion thread completes."""
        name = f"c10d.{self._sequence}"
        self._sequence += 1
        group = (group_id(name), len(inputs)) if len(inputs) > 1 else (-1, 0)
        submitted = []
        try:
            for i, tensor in enumerate(inputs):
                request_name = f"{name}.{i}" if len(inputs) > 1 else name
                submitted.append((submit(self._conn, tensor=tensor, name=request_name,
                                         group=group, **params), request_name))
        except HorovodInternalError as error:  # the job failed: c10d's backend error
            raise dist.DistBackendError(f"allreduced: {error}") from None
        work = Work(f"{kind} {name}")
        self._completer.add(Operation(self._conn, submitted, finish), work)
        return work

    @staticmethod
    def _result(result, dtype):
        """A completed result as a new flat tensor of `dtype`."""
        values = torch.empty(0, dtype=dtype)
        copy_result(result, values)
        return values.reshape(-1)

    @staticmethod
    def _results_into(tensors):
        def finish(results):
            for result, tensor in zip(results, tensors):
                copy_result(result, tensor)
            return tensors
        return finish

    def shutdown(self):
        """Finishes what is in flight, then leaves the job (destroy_process_group, or exit);
        later calls do nothing."""
        self._completer.stop()
        self._conn.client.close()
        atexit.unregister(self.shutdown)
