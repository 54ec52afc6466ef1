"""Finds and loads _allreduced_ops.so: once as a TensorFlow op library (registers the ops) and
once through ctypes (init, shutdown, topology, the client library's named constants)."""
import ctypes
import functools
import os

import tensorflow as tf

from allreduced.common import native_library

_HERE = os.path.dirname(os.path.abspath(__file__))


def _path():
    """$ALLREDUCED_TF_OPS, beside this module (the wheel), or Bazel's (common.native_library)."""
    return native_library.find("_allreduced_ops.so", "ALLREDUCED_TF_OPS", _HERE, "tfplugin")


@functools.lru_cache(maxsize=None)
def ops():
    return tf.load_op_library(_path())


@functools.lru_cache(maxsize=None)
def library():
    ops()  # the op registrations first
    lib = ctypes.CDLL(_path())
    lib.allreduced_tf_init.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.allreduced_tf_init.restype = ctypes.c_int
    lib.allreduced_tf_topology.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.allreduced_tf_job.restype = ctypes.c_char_p
    lib.allreduced_tf_add_process_set.argtypes = [ctypes.c_int] * 5 + [ctypes.c_char_p,
                                                                       ctypes.c_size_t]
    lib.allreduced_tf_add_process_set.restype = ctypes.c_int
    lib.allreduced_tf_remove_process_set.argtypes = [ctypes.c_int]
    lib.allreduced_tf_gpu_kernels.restype = ctypes.c_int
    lib.allreduced_tf_constants.argtypes = [ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)),
                                            ctypes.POINTER(ctypes.POINTER(ctypes.c_int))]
    lib.allreduced_tf_constants.restype = ctypes.c_int
    return lib


@functools.lru_cache(maxsize=None)
def constants():
    """{"ARD_SUM": 1, "ARD_FLOAT32": 9, ...}: every ARD_* constant of client/allreduced_client.h
    (collectives, dtypes, reduce ops, codes) as compiled into the op library, so Python never
    keeps its own copy of the wire's numbers."""
    names = ctypes.POINTER(ctypes.c_char_p)()
    values = ctypes.POINTER(ctypes.c_int)()
    count = library().allreduced_tf_constants(ctypes.byref(names), ctypes.byref(values))
    return {names[i].decode(): values[i] for i in range(count)}
