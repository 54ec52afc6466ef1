"""What this build has, answered truthfully for every binding (Horovod's *_built/*_enabled):
collectives go through the daemon's own TCP data plane and shared memory, never through MPI,
Gloo, DDL, oneCCL or ROCm. Whether GPU tensors go through NCCL is each binding's own answer
(its nccl_built/cuda_built)."""


def mpi_built():
    return False


def gloo_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def mpi_enabled():
    return False


def gloo_enabled():
    return False


def mpi_threads_supported():
    return False
