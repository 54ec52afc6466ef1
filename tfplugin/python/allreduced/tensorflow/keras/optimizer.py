"""DistributedOptimizer for Keras 3 optimizers and load_model that restores it.

The wrapper is a subclass of the optimizer's own class, created per class and options, that
reduces the gradients over the ranks right before the optimizer clips them and updates the
variables (`_clip_gradients`, which Keras calls with the final gradients on every update step:
plain steps and, with gradient accumulation, only the steps that apply the accumulated
gradients). So clipping sees the global gradient, and `backward_passes_per_step` is Keras's own
`gradient_accumulation_steps`: the accumulators are optimizer variables inside the compiled step,
and ranks communicate once per update. The subclass keeps the class name and module of the wrapped
optimizer, so a saved model names a plain Keras optimizer and loads anywhere; `load_model` wraps it
again.
"""
import functools

import keras

from allreduced.tensorflow.basics import Average
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.gradient_reduction import reduce_gradients
from allreduced.tensorflow.process_sets import global_process_set


@functools.lru_cache(maxsize=None)
def _distributed_class(base, compression, op, gradient_predivide_factor, sparse_as_dense,
                       average_aggregated_gradients, process_set):
    class _Distributed(base):
        _allreduced_wrapped = True

        def _clip_gradients(self, grads):
            grads = reduce_gradients(list(grads), None, compression=compression, op=op,
                                     gradient_predivide_factor=gradient_predivide_factor,
                                     sparse_as_dense=sparse_as_dense, process_set=process_set,
                                     name="DistributedOptimizer")
            steps = self.gradient_accumulation_steps
            if steps and not average_aggregated_gradients:
                # Keras averages the accumulated passes; Horovod's default sums them.
                grads = [None if g is None else g * steps for g in grads]
            return super()._clip_gradients(grads)

    _Distributed.__name__ = base.__name__
    _Distributed.__qualname__ = base.__qualname__
    _Distributed.__module__ = base.__module__
    return _Distributed


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps a Keras 3 optimizer: gradients are reduced over the ranks of `process_set` before
    each update; everything else is the wrapped optimizer's. With backward_passes_per_step = N > 1
    gradients accumulate locally for N steps (summed, or averaged with
    average_aggregated_gradients) and are reduced once per N steps."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"DistributedOptimizer wraps a Keras optimizer, got {type(optimizer)}; "
                        "use allreduced.tensorflow.DistributedOptimizer for tf.compat.v1 ones")
    if getattr(optimizer, "_allreduced_wrapped", False):
        raise ValueError("optimizer is already a DistributedOptimizer")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    cls = _distributed_class(type(optimizer), compression, op, gradient_predivide_factor,
                             sparse_as_dense, average_aggregated_gradients, process_set)
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    if backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = backward_passes_per_step
    return cls.from_config(config)


def _optimizer_classes():
    for value in vars(keras.optimizers).values():
        if (isinstance(value, type) and issubclass(value, keras.optimizers.Optimizer)
                and value is not keras.optimizers.Optimizer):
            yield value


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, **kwargs):
    """keras.models.load_model, with the model's optimizer (any Keras optimizer, or one of
    `custom_optimizers`) wrapped in DistributedOptimizer and its saved state restored."""
    objects = {}
    for cls in list(_optimizer_classes()) + list(custom_optimizers or []):
        objects[cls.__name__] = _distributed_class(cls, compression, Average, 1.0, False, False,
                                                   global_process_set)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects, **kwargs)
