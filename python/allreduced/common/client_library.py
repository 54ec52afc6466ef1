"""The client library (libard_client.so, client/allreduced_client.h) through ctypes: its structs,
its functions with their signatures, and its ARD_* constants read from the library itself
(ard_constants), so Python keeps no copy of the wire's numbers. Framework-neutral: the PyTorch
binding (allreduced.torch) is built on it.

Why ctypes and not a C++ extension: the library's C ABI does not change with the framework, so
nothing here is compiled against torch headers and a torch upgrade cannot break it (Horovod's
extension must be rebuilt for every torch release). ctypes releases the GIL during each call.
"""
import ctypes
import functools
import os

from allreduced.common import native_library

MAX_DIMS = 8
ERR_LEN = 512


class Options(ctypes.Structure):
    _fields_ = [("socket_path", ctypes.c_char_p), ("job", ctypes.c_char_p),
                ("rank", ctypes.c_int), ("size", ctypes.c_int), ("local_rank", ctypes.c_int),
                ("local_size", ctypes.c_int), ("timeout_ms", ctypes.c_int),
                ("arena_segment_bytes", ctypes.c_uint64), ("arena_max_bytes", ctypes.c_uint64)]


class Topology(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in
                ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")]


class Request(ctypes.Structure):
    _fields_ = [("collective", ctypes.c_int), ("dtype", ctypes.c_int),
                ("reduce_op", ctypes.c_int), ("root_rank", ctypes.c_int),
                ("prescale", ctypes.c_double), ("postscale", ctypes.c_double),
                ("name", ctypes.c_char_p), ("ndims", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p),
                ("bytes", ctypes.c_uint64), ("group_id", ctypes.c_int),
                ("group_size", ctypes.c_int), ("num_splits", ctypes.c_int),
                ("splits", ctypes.POINTER(ctypes.c_int64))]


class Result(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char_p), ("ndims", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("data", ctypes.c_void_p),
                ("bytes", ctypes.c_uint64), ("num_splits", ctypes.c_int),
                ("splits", ctypes.POINTER(ctypes.c_int64)), ("join_last_rank", ctypes.c_int)]


def path():
    """libard_client.so: $ALLREDUCED_CLIENT_LIB, beside this module (the wheel), or Bazel's."""
    return native_library.find("libard_client.so", "ALLREDUCED_CLIENT_LIB",
                               os.path.dirname(os.path.abspath(__file__)), "client")


@functools.lru_cache(maxsize=None)
def library():
    lib = ctypes.CDLL(path())
    p = ctypes.POINTER
    err = [ctypes.c_char_p, ctypes.c_size_t]
    client = ctypes.c_void_p
    signatures = {
        "ard_options_init": (None, [p(Options)]),
        "ard_client_create": (ctypes.c_int, [p(Options), p(client)] + err),
        "ard_client_job": (ctypes.c_char_p, [client]),
        "ard_client_hosts_updated": (ctypes.c_int, [client]),
        "ard_client_topology": (None, [client, p(Topology)]),
        "ard_request_init": (None, [p(Request)]),
        "ard_submit": (ctypes.c_int, [client, p(Request), ctypes.c_void_p, ctypes.c_void_p,
                                      p(ctypes.c_uint64)] + err),
        "ard_wait": (ctypes.c_int, [client, ctypes.c_uint64, ctypes.c_int, p(Result)]),
        "ard_release": (None, [client, ctypes.c_uint64]),
        "ard_client_destroy": (None, [client]),
        "ard_code_name": (ctypes.c_char_p, [ctypes.c_int]),
        "ard_constants": (ctypes.c_int, [p(p(ctypes.c_char_p)), p(p(ctypes.c_int))]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


@functools.lru_cache(maxsize=None)
def constants():
    """{"ARD_SUM": 1, "ARD_FLOAT32": 9, ...}: every ARD_* constant of allreduced_client.h."""
    names = ctypes.POINTER(ctypes.c_char_p)()
    values = ctypes.POINTER(ctypes.c_int)()
    count = library().ard_constants(ctypes.byref(names), ctypes.byref(values))
    return {names[i].decode(): values[i] for i in range(count)}


def code_name(code):
    return library().ard_code_name(code).decode()


class ClientError(Exception):
    """A client library call failed: `code` (ARD_*, absl's numbering) and its message."""

    def __init__(self, code, message):
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.message = message


class Client:
    """One connection to the host's daemon, registered with one job (ard_client_create).

    Lifecycle: 1. Client(...) connects and waits until the job formed (raises ClientError);
    2. submit() from any thread returns a handle; wait() it (blocking in C with the GIL released)
    and release() it once its result was read; 3. close() cancels what is pending."""

    def __init__(self, job=None, rank=-1, size=-1, local_rank=-1, local_size=-1):
        lib = library()
        options = Options()
        lib.ard_options_init(ctypes.byref(options))
        self._job_arg = job.encode() if job else None  # alive during create
        if job:
            options.job = self._job_arg
        options.rank, options.size = rank, size
        options.local_rank, options.local_size = local_rank, local_size
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(ERR_LEN)
        code = lib.ard_client_create(ctypes.byref(options), ctypes.byref(handle), err, ERR_LEN)
        if code != 0:
            raise ClientError(code, err.value.decode(errors="replace"))
        self._lib = lib
        self._handle = handle
        topology = Topology()
        lib.ard_client_topology(handle, ctypes.byref(topology))
        self.topology = topology
        self.job = lib.ard_client_job(handle).decode()

    def hosts_updated(self):
        return bool(self._lib.ard_client_hosts_updated(self._handle))

    def submit(self, request):
        """Sends `request` (a Request whose pointers stay alive during the call); the handle."""
        handle = ctypes.c_uint64()
        err = ctypes.create_string_buffer(ERR_LEN)
        code = self._lib.ard_submit(self._handle, ctypes.byref(request), None, None,
                                    ctypes.byref(handle), err, ERR_LEN)
        if code != 0:
            raise ClientError(code, err.value.decode(errors="replace"))
        return handle.value

    def wait(self, handle, timeout_ms, result):
        """Fills `result` and returns its code, or ARD_PENDING when still pending."""
        return self._lib.ard_wait(self._handle, handle, timeout_ms, ctypes.byref(result))

    def release(self, handle):
        self._lib.ard_release(self._handle, handle)

    def close(self):
        if self._handle:
            self._lib.ard_client_destroy(self._handle)
            self._handle = None
