"""Connecting to the daemon and this process's place in the job (Horovod's init/rank/size...)."""
import atexit
import ctypes

import tensorflow as tf

from allreduced.common import launch_notice
from allreduced.common import timeline as _timeline
from allreduced.common.built import (ccl_built, ddl_built, gloo_built,  # noqa: F401
                                     gloo_enabled, mpi_built, mpi_enabled,
                                     mpi_threads_supported, rocm_built)
from allreduced.common.process_sets import Registry
from allreduced.tensorflow.ops_library import constants, library, ops

# Horovod's reduce-op objects: the client library's ARD_* reduce ops (read from the op library).
Sum = constants()["ARD_SUM"]
Average = constants()["ARD_AVERAGE"]
Min = constants()["ARD_MIN"]
Max = constants()["ARD_MAX"]
Product = constants()["ARD_PRODUCT"]
Adasum = constants()["ARD_ADASUM"]  # allreduce of float host tensors (docs/user-guide.md "Adasum")

_initialized = [False]
_homogeneous = [True]


def _check_call(code, err, what):
    if code != 0:
        raise RuntimeError(f"allreduced {what} failed: " + err.value.decode(errors="replace"))


def init(comm=None, process_sets=None):
    """Connects to the local daemon and waits until every rank of the job registered. `comm` (an
    MPI communicator or list of ranks in Horovod) is not supported: ranks come from the launcher's
    environment. `process_sets` are ProcessSet objects to register right away, collectively."""
    if comm is not None:
        raise NotImplementedError("allreduced: init(comm=...) is not supported; the job's ranks "
                                  "come from the launcher's environment (see docs/user-guide.md)")
    launch_notice.arrive()
    err = ctypes.create_string_buffer(512)
    _check_call(library().allreduced_tf_init(err, ctypes.c_size_t(len(err))), err, "init")
    if not _initialized[0]:
        # A process that ends without shutdown() still says goodbye (BYE): the daemon then takes
        # its exit as the job's normal end rather than a crash that fails the other ranks.
        atexit.register(_shutdown_at_exit)
        # Runs before the shutdown (atexit is last in, first out): the trace has the last step.
        atexit.register(_timeline.stop)
        # Every rank's host rank count (its local_size), gathered once while every rank is in
        # init(): is_homogeneous() then answers without a collective of its own.
        sizes = evaluate_now(lambda: ops().allreduced_allgather(
            tf.constant([local_size()], tf.int32), tensor_name="init.local_sizes"))
        _homogeneous[0] = len(set(sizes.tolist())) == 1
    _initialized[0] = True
    _timeline.start_from_env(rank(), _job_name())
    for ps in process_sets or []:
        add_process_set(ps)


def shutdown():
    library().allreduced_tf_shutdown()
    process_set_registry.forget_all()
    _initialized[0] = False


def _shutdown_at_exit():
    # Training that failed under the elastic launcher leaves as a crash, not with a goodbye: its
    # daemon must not wait for it in the next generation.
    if _initialized[0] and not launch_notice.training_failed():
        shutdown()


def is_initialized():
    return _initialized[0]


def _topology():
    values = (ctypes.c_int * 6)()
    library().allreduced_tf_topology(values)
    if values[0] < 0:
        raise ValueError("allreduced has not been initialized; use allreduced.tensorflow.init().")
    return list(values)


def rank():
    return _topology()[0]


def size():
    return _topology()[1]


def local_rank():
    return _topology()[2]


def local_size():
    return _topology()[3]


def cross_rank():
    return _topology()[4]


def cross_size():
    return _topology()[5]


def is_homogeneous():
    """True when every host of the job runs the same number of ranks."""
    if not _initialized[0]:
        raise ValueError("allreduced has not been initialized; use allreduced.tensorflow.init().")
    return _homogeneous[0]


def evaluate_now(build):
    """The value (numpy) of the tensor `build()` returns, computed at once: eagerly, or, while a
    tf.compat.v1 graph or a tf.function is being built, in a session of a graph of its own (so
    nothing is added to the caller's graph)."""
    if tf.executing_eagerly():
        return build().numpy()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        return session.run(build())


def _job_name():
    return library().allreduced_tf_job().decode()


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline: on rank 0, records the whole job (every rank, every host) into
    `file_path` as a Chrome trace until stop_timeline() or exit (allreduced.common.timeline;
    docs/operator-guide.md "Timeline"). Other ranks do nothing, as in Horovod. `mark_cycles` has
    no equivalent: fused groups are always shown."""
    if not _initialized[0]:
        raise ValueError("allreduced has not been initialized; use allreduced.tensorflow.init().")
    if rank() == 0:
        _timeline.start(file_path, _job_name())


def stop_timeline():
    """Stops the timeline start_timeline() (or HOROVOD_TIMELINE) started and writes its file."""
    _timeline.stop()


def _topology_op(index, name):
    return ops().allreduced_topology(index=index, name=name)


def rank_op(name=None):
    """The rank as an op (read when it runs, so a graph built before init() works)."""
    return _topology_op(0, name or "rank_op")


def size_op(process_set_id=0, name=None):
    """The job's size as an op, or a registered process set's (on every rank, member or not, as
    in Horovod)."""
    if process_set_id == 0:
        return _topology_op(1, name or "size_op")
    ps = process_set_registry.get(process_set_id)
    return tf.constant(ps.size(), tf.int32, name=name or "size_op")


def local_rank_op(name=None):
    return _topology_op(2, name or "local_rank_op")


def local_size_op(name=None):
    return _topology_op(3, name or "local_size_op")


# What this build has: allreduced.common.built, but for GPU tensors (this op library's kernels).
def nccl_built():
    """True when GPU tensors are reduced by the daemon's NCCL communicators (a CUDA build)."""
    return cuda_built()


def cuda_built():
    """True when the op library has GPU kernels (built with CUDA; see docs/user-guide.md)."""
    return bool(library().allreduced_tf_gpu_kernels())


# This binding's process sets (allreduced.tensorflow.process_sets has the rest of their API).
process_set_registry = Registry(rank=rank, size=size)


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks); every rank of the job must call this, in the
    same order. Returns the ProcessSet.

    Each set is registered collectively; its members open one more connection to their daemon and
    form a sub-job "<job>.ps<id>", so the daemon negotiates, fuses and reduces among the members
    only (Average divides by the set's size). Non-members keep no state for it beyond the
    ProcessSet object."""
    ps, ps_id = process_set_registry.prepare(process_set)
    # Which host holds each rank, so members know their local rank and size within the set.
    hosts = evaluate_now(lambda: ops().allreduced_allgather(
        tf.constant([cross_rank()], tf.int32), tensor_name=f"process_set.{ps_id}.hosts"))
    me = rank()
    if me in ps.ranks:
        local = [r for r in ps.ranks if hosts[r] == hosts[me]]
        err = ctypes.create_string_buffer(512)
        code = library().allreduced_tf_add_process_set(
            ps_id, ps.ranks.index(me), len(ps.ranks), local.index(me), len(local), err,
            ctypes.c_size_t(len(err)))
        _check_call(code, err, f"add_process_set({ps.ranks})")
    return process_set_registry.record(ps, ps_id)


def remove_process_set(process_set):
    """Unregisters a process set (collectively). Returns True when it was registered."""
    if not process_set_registry.is_registered(process_set):
        return False
    library().allreduced_tf_remove_process_set(process_set.process_set_id)
    process_set_registry.forget(process_set)
    return True
