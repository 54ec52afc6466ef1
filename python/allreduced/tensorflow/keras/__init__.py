"""allreduced.tensorflow.keras: horovod.tensorflow.keras for Keras 3 and for tf_keras (the Keras
of TF_USE_LEGACY_KERAS=1) — a DistributedOptimizer that reduces gradients over the ranks
(model.compile/model.fit unchanged), the callbacks (also as `callbacks.X`), load_model, and the
topology and collective functions."""
from allreduced.tensorflow import (Adasum, Average, Compression, Max, Min, Product, ProcessSet,
                                   Sum, SyncBatchNormalization, add_process_set, allgather,
                                   allgather_object, allreduce, alltoall, broadcast,
                                   broadcast_object, broadcast_variables, cross_rank, cross_size,
                                   global_process_set, grouped_allreduce, init, is_initialized,
                                   join, local_rank, local_size, rank, reducescatter,
                                   remove_process_set, shutdown, size)
from allreduced.tensorflow.keras import callbacks
from allreduced.tensorflow.keras import elastic  # noqa: F401 (hvd.elastic)
from allreduced.tensorflow.keras.callbacks import (BestModelCheckpoint,
                                                   BroadcastGlobalVariablesCallback,
                                                   LearningRateScheduleCallback,
                                                   LearningRateWarmupCallback,
                                                   MetricAverageCallback)
from allreduced.tensorflow.keras.functions import broadcast_global_variables
from allreduced.tensorflow.keras.optimizer import (DistributedOptimizer,
                                                   PartialDistributedOptimizer, load_model)
