"""allreduced.torch: Horovod's PyTorch API over the allreduced daemon. A Horovod script runs
after `import horovod.torch as hvd` becomes `import allreduced.torch as hvd`.

Each process connects to its host's daemon (ALLREDUCED_SOCKET) and registers with its job in
init(); collectives hand tensors to the daemon through the client library (libard_client.so,
loaded with ctypes: nothing is compiled against torch, so torch upgrades cannot break it).
"""
from allreduced.torch import version_check as _version_check  # noqa: F401 (first)
from allreduced.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from allreduced.torch import elastic  # noqa: F401 (hvd.elastic)
from allreduced.torch.autograd import (allgather, allreduce, allreduce_, alltoall, broadcast,
                                       broadcast_, grouped_allgather, grouped_allreduce,
                                       grouped_allreduce_, grouped_reducescatter, reducescatter)
from allreduced.torch.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built,
                                     cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                                     gloo_enabled, init, is_homogeneous, is_initialized,
                                     local_rank, local_size, mpi_built, mpi_enabled,
                                     mpi_threads_supported, nccl_built, rank, rocm_built,
                                     shutdown, size, start_timeline, stop_timeline)
from allreduced.torch.collectives import (allgather_async, allreduce_async, allreduce_async_,
                                          alltoall_async, barrier, broadcast_async,
                                          broadcast_async_, grouped_allgather_async,
                                          grouped_allreduce_async, grouped_allreduce_async_,
                                          grouped_reducescatter_async, join, poll,
                                          reducescatter_async, sparse_allreduce_async,
                                          synchronize)
from allreduced.torch.compression import Compression
from allreduced.torch.process_sets import (ProcessSet, add_process_set, global_process_set,
                                           remove_process_set)
from allreduced.torch.functions import (allgather_object, broadcast_object,
                                        broadcast_optimizer_state, broadcast_parameters)
from allreduced.torch.optimizer import DistributedOptimizer
from allreduced.torch.sync_batch_norm import SyncBatchNorm
import torch.distributed as _dist  # noqa: E402

if _dist.is_available():  # a torch built without distributed support has no c10d to extend
    from allreduced.torch import c10d  # noqa: F401 (registers torch.distributed's "allreduced")
