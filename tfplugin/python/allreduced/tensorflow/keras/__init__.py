"""Keras 3 integration, like horovod.tensorflow.keras: a DistributedOptimizer that allreduces
gradients before applying them (so model.compile/model.fit work unchanged), and the usual
callbacks. Work in progress: LearningRateWarmupCallback and optimizer saving/loading with the model
are not here yet.
"""
import keras
import tensorflow as tf

import allreduced.tensorflow as _hvd
from allreduced.tensorflow import (Average, Compression, Max, Min, Product, Sum, allgather,
                                   allreduce, broadcast, broadcast_variables, cross_rank,
                                   cross_size, init, is_initialized, local_rank, local_size, rank,
                                   shutdown, size)


def _reduce(grads, compression, op):
    out = []
    for i, g in enumerate(grads):
        if g is None:
            out.append(None)
            continue
        g = tf.convert_to_tensor(g)
        c, ctx = compression.compress(g)
        out.append(compression.decompress(allreduce(c, op=op, name=f"DistributedOptimizer.{i}"),
                                          ctx))
    return out


def DistributedOptimizer(optimizer, name=None, compression=Compression.none, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=True):
    """Wraps a Keras 3 optimizer: gradients are reduced over all ranks in apply()/
    apply_gradients(); everything else is the wrapped optimizer's."""
    if backward_passes_per_step != 1:
        # Local accumulation needs optimizer-owned variables and a step counter that work inside
        # Keras's compiled train step; not done yet.
        raise NotImplementedError("allreduced: backward_passes_per_step > 1 is not supported yet")
    base = optimizer.__class__

    class _Distributed(base):
        _allreduced_wrapped = True

        def apply(self, grads, trainable_variables=None):
            grads = list(grads)
            return super().apply(_reduce(grads, compression, op), trainable_variables)

    _Distributed.__name__ = base.__name__
    _Distributed.__qualname__ = base.__qualname__
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    return _Distributed.from_config(config)


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's (and optimizer's) variables from `root_rank` before training, so
    every rank starts from the same state."""

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank
        self._done = False

    def on_train_batch_begin(self, batch, logs=None):
        if self._done:
            return
        broadcast_variables(self.model.variables, self.root_rank)
        if getattr(self.model, "optimizer", None) is not None:
            broadcast_variables(self.model.optimizer.variables, self.root_rank)
        self._done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Averages the epoch's metrics over all ranks (logs on every rank show the average)."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for key in sorted(logs):
            value = tf.constant(float(logs[key]), dtype=tf.float64)
            logs[key] = float(allreduce(value, op=Average, name=f"metric.{key}").numpy())
