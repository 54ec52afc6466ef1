"""Connecting to the daemon and this process's place in the job (Horovod's init/rank/size...).

Each process holds one client connection per process set it belongs to: the global job's (set 0,
made by init()) and, for each added set, a sub-job "<job>.ps<id>" of the set's ranks, so the
daemon negotiates and reduces among them only (as the TensorFlow op library does). A connection
also names the ops called without a name, by call order ("allreduce.noname.<n>"), which every
rank of the set repeats alike, and refuses a name already in flight (Horovod's ValueError).
"""
import atexit

from allreduced.common import launch_notice
from allreduced.common import timeline as _timeline
from allreduced.common.built import (ccl_built, ddl_built, gloo_built,  # noqa: F401
                                     gloo_enabled, mpi_built, mpi_enabled,
                                     mpi_threads_supported, rocm_built)
from allreduced.common.client_library import Client, ClientError, constants

_C = constants()

# Horovod's reduce-op objects: the client library's ARD_* reduce ops.
Sum = _C["ARD_SUM"]
Average = _C["ARD_AVERAGE"]
Min = _C["ARD_MIN"]
Max = _C["ARD_MAX"]
Product = _C["ARD_PRODUCT"]
Adasum = _C["ARD_ADASUM"]


class Connection:
    """A Client plus the per-set naming state (see the module docstring)."""

    def __init__(self, client):
        self.client = client
        self._counters = {}
        self._in_flight = {}  # name -> True while a request of that name may be pending

    def auto_name(self, kind, name):
        if name:
            return name
        n = self._counters.get(kind, 0)
        self._counters[kind] = n + 1
        return f"{kind}.noname.{n}"

    def claim_name(self, name):
        if name in self._in_flight:
            raise ValueError(f"Duplicate name: a collective named {name!r} is already in flight "
                             "on this rank; wait for it (synchronize) before reusing the name")
        self._in_flight[name] = True

    def forget_name(self, name):
        self._in_flight.pop(name, None)


_connections = {}  # process set id -> Connection
# What init/shutdown need from the modules built on this one (no import circle): set by
# collectives.py (allgather_sizes) and process_sets.py (add_process_set, forget_process_sets).
_hooks = {}
_state = {"homogeneous": True, "at_exit": False}


def connection(process_set_id=0):
    conn = _connections.get(process_set_id)
    if conn is None:
        if 0 not in _connections:
            raise ValueError("Horovod has not been initialized; use hvd.init().")
        raise ValueError(f"this rank is not a member of process set {process_set_id}")
    return conn


def _check(call, what):
    try:
        return call()
    except ClientError as error:
        raise RuntimeError(f"allreduced {what} failed: {error}") from None


def init(comm=None, process_sets=None):
    """Connects to the host's daemon and waits until every rank of the job registered (ranks from
    the launcher's environment). `comm` (an MPI communicator in Horovod) is not supported.
    `process_sets`: ProcessSet objects to add right away, collectively."""
    if comm is not None:
        raise NotImplementedError("allreduced: init(comm=...) is not supported; the job's ranks "
                                  "come from the launcher's environment (see docs/user-guide.md)")
    if 0 not in _connections:
        launch_notice.arrive()
        _connections[0] = Connection(_check(Client, "init"))
        if not _state["at_exit"]:
            _state["at_exit"] = True
            # A process that ends without shutdown() still says goodbye, so the daemon takes its
            # exit as the job's end rather than a crash; the timeline stops first (LIFO).
            atexit.register(_shutdown_at_exit)
            atexit.register(_timeline.stop)
        sizes = _hooks["allgather_sizes"](local_size(), "init.local_sizes")
        _state["homogeneous"] = len(set(sizes)) == 1
        _timeline.start_from_env(rank(), _connections[0].client.job)
    for ps in process_sets or []:
        _hooks["add_process_set"](ps)


def shutdown():
    """Closes every connection (process sets first, while the global job still stands)."""
    from allreduced.torch.requests import handles
    for ps_id in sorted(_connections, reverse=True):
        _connections.pop(ps_id).client.close()
    handles.clear()
    _hooks["forget_process_sets"]()


def _shutdown_at_exit():
    if _connections and not launch_notice.training_failed():  # (see allreduced.tensorflow's)
        shutdown()


def is_initialized():
    return 0 in _connections


def _topology():
    return connection(0).client.topology


def rank():
    return _topology().rank


def size():
    return _topology().size


def local_rank():
    return _topology().local_rank


def local_size():
    return _topology().local_size


def cross_rank():
    return _topology().cross_rank


def cross_size():
    return _topology().cross_size


def is_homogeneous():
    """True when every host of the job runs the same number of ranks."""
    connection(0)
    return _state["homogeneous"]


def hosts_updated():
    """True when the daemon said that ranks wait to join this elastic job."""
    return 0 in _connections and _connections[0].client.hosts_updated()


def job_name():
    return connection(0).client.job


def add_connection(process_set_id, rank_in_set, set_size, local_rank_in_set, local_set_size):
    """Joins the sub-job of process set `process_set_id` (waits until it formed)."""
    job = f"{job_name()}.ps{process_set_id}"
    client = _check(lambda: Client(job, rank_in_set, set_size, local_rank_in_set,
                                   local_set_size), f"add_process_set({process_set_id})")
    _connections[process_set_id] = Connection(client)


def remove_connection(process_set_id):
    conn = _connections.pop(process_set_id, None)
    if conn is not None:
        conn.client.close()


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline: on rank 0, records the whole job into `file_path` as a Chrome trace
    until stop_timeline() or exit (allreduced.timeline). Other ranks do nothing, as in Horovod."""
    if rank() == 0:
        _timeline.start(file_path, job_name())


def stop_timeline():
    _timeline.stop()


# What this build has: allreduced.common.built; GPU tensors are staged through host memory here.
def nccl_built():
    return 0


def cuda_built():
    return False

