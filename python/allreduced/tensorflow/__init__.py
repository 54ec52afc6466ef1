"""allreduced.tensorflow: Horovod's TensorFlow API over the allreduced daemon. A Horovod script
runs after `import horovod.tensorflow as hvd` becomes `import allreduced.tensorflow as hvd`.

Each process connects to its host's daemon (ALLREDUCED_SOCKET) and registers with its job
(ALLREDUCED_JOB or the launcher's name for the launch, ranks from the launcher's environment) in
init(). Collectives are TensorFlow ops (tfplugin/ops) that hand tensors to the daemon through
shared memory; their gradients are registered as Horovod defines them.
"""
# First: refuses a TensorFlow other than the one a wheel's op library was built for.
from allreduced.tensorflow import built_for as _built_for  # noqa: F401
from allreduced.tensorflow import gradients as _gradients  # noqa: F401 (registers gradients)
from allreduced.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from allreduced.tensorflow.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built,
                                          cross_rank, cross_size, cuda_built, gloo_built,
                                          gloo_enabled, init, is_homogeneous, is_initialized,
                                          local_rank, local_rank_op, local_size, local_size_op,
                                          mpi_built, mpi_enabled, mpi_threads_supported,
                                          nccl_built, rank, rank_op, rocm_built, shutdown, size,
                                          size_op, start_timeline, stop_timeline)
from allreduced.tensorflow.collectives import (allgather, allreduce, alltoall, barrier,
                                               broadcast, broadcast_,
                                               broadcast_global_variables, broadcast_variables,
                                               grouped_allgather, grouped_allreduce,
                                               grouped_reducescatter, join, reducescatter)
from allreduced.tensorflow import elastic  # noqa: F401 (hvd.elastic)
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.objects import allgather_object, broadcast_object, broadcast_object_fn
from allreduced.tensorflow.optimizer_v1 import DistributedOptimizer
from allreduced.tensorflow.process_sets import (ProcessSet, add_process_set, global_process_set,
                                                process_set_included_op, remove_process_set)
from allreduced.tensorflow.sync_batch_norm import SyncBatchNormalization
from allreduced.tensorflow.tape import DistributedGradientTape, PartialDistributedGradientTape
