"""Tensors in and out of the client library: a torch tensor becomes an ard_request (its data is
copied into the daemon's shared memory during submit, so the tensor may change right after), a
completed handle's result is copied into the output tensor. Handles are Horovod's: small integers
that poll() and synchronize() take; each stands for one op (one client handle, or one per tensor
of a group). Not thread-safe beyond what Horovod promises (one Python thread issues the ops).
"""
import ctypes
import zlib

import torch

from allreduced.common.client_library import ClientError, Request, Result, constants
from allreduced.common.exceptions import HorovodInternalError

_C = constants()
ARD_PENDING = _C["ARD_PENDING"]
_DTYPES = {
    torch.uint8: _C["ARD_UINT8"], torch.int8: _C["ARD_INT8"], torch.int16: _C["ARD_INT16"],
    torch.int32: _C["ARD_INT32"], torch.int64: _C["ARD_INT64"],
    torch.float16: _C["ARD_FLOAT16"], torch.bfloat16: _C["ARD_BFLOAT16"],
    torch.float32: _C["ARD_FLOAT32"], torch.float64: _C["ARD_FLOAT64"], torch.bool: _C["ARD_BOOL"],
}
if hasattr(torch, "uint16"):
    _DTYPES[torch.uint16] = _C["ARD_UINT16"]


def wire_dtype(tensor):
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise ValueError(f"Tensor type {tensor.type()} is not supported.")
    return dtype


def host_contiguous(tensor):
    """`tensor` as a contiguous CPU tensor (itself when it already is one)."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    return tensor.contiguous()


def group_id(name):
    """The id of a group of tensors: the same on every rank for the same base name."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def submit(conn, collective, name, tensor=None, reduce_op=0, root_rank=0, prescale=1.0,
           postscale=1.0, group=(-1, 0), splits=None):
    """Sends one request on `conn` (a basics.Connection); the client handle. `tensor` None for
    barrier and join. Raises ValueError for misuse the library refuses, HorovodInternalError when
    the job failed."""
    request = Request()
    conn.client._lib.ard_request_init(ctypes.byref(request))
    request.collective = collective
    request.name = name.encode()
    keep = []
    if tensor is not None:
        data = host_contiguous(tensor)
        shape = (ctypes.c_int64 * max(1, data.dim()))(*data.shape)
        keep += [data, shape]
        request.dtype = wire_dtype(data)
        request.ndims = data.dim()
        request.shape = shape
        request.data = data.data_ptr() if data.numel() else None
        request.bytes = data.numel() * data.element_size()
    request.reduce_op = reduce_op
    request.root_rank = root_rank
    request.prescale = prescale
    request.postscale = postscale
    request.group_id, request.group_size = group
    if splits is not None:
        values = (ctypes.c_int64 * max(1, len(splits)))(*splits)
        keep.append(values)
        request.num_splits = len(splits)
        request.splits = values
    conn.claim_name(name)
    try:
        return conn.client.submit(request)
    except ClientError as error:
        conn.forget_name(name)
        if error.code == _C["ARD_INVALID_ARGUMENT"]:
            raise ValueError(str(error)) from None
        raise HorovodInternalError(str(error)) from None


def copy_result(result, output):
    """Copies a completed result into `output` (resized to the result's shape when it differs)."""
    shape = [result.shape[d] for d in range(result.ndims)]
    if list(output.shape) != shape:
        output.resize_(shape)
    if output.device.type == "cpu" and output.is_contiguous():
        target = output
    else:
        target = torch.empty(shape, dtype=output.dtype)
    if result.bytes != target.numel() * target.element_size():
        raise HorovodInternalError(f"allreduced returned {result.bytes} bytes for a result of "
                                   f"shape {shape} and type {target.dtype}")
    if result.bytes:
        ctypes.memmove(target.data_ptr(), result.data, result.bytes)
    if target is not output:
        output.copy_(target)


def received_splits(result):
    return torch.tensor([result.splits[i] for i in range(result.num_splits)], dtype=torch.int32)


class Operation:
    """One op in flight: its client handles (with their names) on one connection, and `finish`,
    which turns the completed results (in handle order) into what synchronize() returns."""

    def __init__(self, conn, handles, finish):
        self.conn = conn
        self.handles = handles  # [(client handle, name)]
        self.finish = finish

    def done(self):
        result = Result()
        return all(self.conn.client.wait(h, 0, result) != ARD_PENDING for h, _ in self.handles)

    def wait(self):
        results = []
        error = None
        for handle, name in self.handles:
            result = Result()
            code = ARD_PENDING
            while code == ARD_PENDING:  # in slices, so Ctrl-C is seen between them
                code = self.conn.client.wait(handle, 1000, result)
            self.conn.forget_name(name)
            if code != 0 and error is None:
                error = (result.message or b"").decode(errors="replace") or f"code {code}"
            results.append(result)
        try:
            if error is not None:
                raise HorovodInternalError(error)
            return self.finish(results)
        finally:
            for handle, _ in self.handles:
                self.conn.client.release(handle)


class HandleTable:
    """Horovod's integer handles -> Operation."""

    def __init__(self):
        self._ops = {}
        self._next = 1

    def add(self, operation):
        handle = self._next
        self._next += 1
        self._ops[handle] = operation
        return handle

    def clear(self):
        self._ops.clear()

    def poll(self, handle):
        operation = self._ops.get(handle)
        if operation is None:
            raise ValueError(f"handle {handle} was not created or has been synchronized")
        return operation.done()

    def synchronize(self, handle):
        operation = self._ops.pop(handle, None)
        if operation is None:
            return None
        return operation.wait()


handles = HandleTable()
