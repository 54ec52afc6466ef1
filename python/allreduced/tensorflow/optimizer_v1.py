"""The legacy DistributedOptimizer for tf.compat.v1.train optimizers: compute_gradients returns
gradients reduced over the ranks; everything else is the wrapped optimizer's."""
import tensorflow as tf

from allreduced.tensorflow.basics import Average
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.gradient_reduction import reduce_gradients
from allreduced.tensorflow.process_sets import global_process_set


class _LegacyDistributedOptimizer(tf.compat.v1.train.Optimizer):
    def __init__(self, optimizer, name, use_locking, options):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._options = options

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        reduced = reduce_gradients(list(grads), list(variables), name="DistributedOptimizer",
                                   **self._options)
        return list(zip(reduced, variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """horovod.tensorflow.DistributedOptimizer: wraps a tf.compat.v1.train.Optimizer, or a Keras
    optimizer (then the same as allreduced.tensorflow.keras.DistributedOptimizer)."""
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step != 1:
            raise NotImplementedError("allreduced: backward_passes_per_step > 1 is supported for "
                                      "Keras optimizers only")
        options = dict(compression=compression, op=op,
                       gradient_predivide_factor=gradient_predivide_factor,
                       sparse_as_dense=sparse_as_dense, process_set=process_set,
                       scale_local_gradients=scale_local_gradients)
        return _LegacyDistributedOptimizer(optimizer, name, use_locking, options)
    from allreduced.tensorflow import keras as _keras
    return _keras.DistributedOptimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, process_set=process_set)
