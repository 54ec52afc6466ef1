"""DistributedOptimizer and PartialDistributedOptimizer for Keras optimizers of either flavour,
and load_model that restores them.

The wrapper is a subclass of the optimizer's own class, made once per class and options:
keras3_optimizer.py for Keras 3 optimizers, tf_keras_optimizer.py for tf_keras ones (the Keras of
TF_USE_LEGACY_KERAS=1, new and `legacy` optimizers). Which one is decided by the optimizer given,
so both flavours work in one process. load_model uses the Keras that `tf.keras` names, as
Horovod does.
"""
import tensorflow as tf

from allreduced.tensorflow.basics import Average
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.keras.keras3_optimizer import keras3_class
from allreduced.tensorflow.keras.options import Options
from allreduced.tensorflow.keras.tf_keras_optimizer import tf_keras_class
from allreduced.tensorflow.process_sets import global_process_set


def _tf_keras_optimizer_types():
    import tf_keras
    return tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer


def _flavour(cls):
    """"keras3" or "tf_keras" for an optimizer class, None for anything else."""
    roots = {c.__module__.split(".")[0] for c in cls.__mro__}
    if "tf_keras" in roots and issubclass(cls, _tf_keras_optimizer_types()):
        return "tf_keras"
    if "keras" in roots:
        import keras
        if issubclass(cls, keras.optimizers.Optimizer):
            return "keras3"
    return None


def _distributed_class(cls, options, passes):
    """(subclass, whether the accumulation is in the optimizer's config) for `cls`."""
    flavour = _flavour(cls)
    if flavour == "keras3":
        return keras3_class(cls, options), True
    if flavour == "tf_keras":
        return tf_keras_class(cls, options, passes), False
    raise TypeError(f"DistributedOptimizer wraps a Keras optimizer (Keras 3 or tf_keras), got "
                    f"{cls}; use allreduced.tensorflow.DistributedOptimizer for tf.compat.v1 ones")


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps a Keras optimizer (Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1): gradients are
    reduced over the ranks of `process_set` before each update; everything else is the wrapped
    optimizer's. With backward_passes_per_step = N > 1 gradients accumulate locally for N steps
    (summed, or averaged with average_aggregated_gradients) and are reduced once per N steps."""
    if getattr(optimizer, "_allreduced_wrapped", False):
        raise ValueError("optimizer is already a DistributedOptimizer")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    options = Options(compression, op, gradient_predivide_factor, sparse_as_dense,
                      average_aggregated_gradients, process_set, scale_local_gradients)
    cls, native = _distributed_class(type(optimizer), options, backward_passes_per_step)
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    if native and backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = backward_passes_per_step
    return cls.from_config(config)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """A DistributedOptimizer whose `local_layers`' (a Keras layer or a list of them) trainable
    variables keep each rank's own gradient (divided by the set's size with
    scale_local_gradients, so it keeps the scale of the averaged ones); the others are reduced.
    More can be added with the optimizer's register_local_var(var)."""
    opt = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression,
                               sparse_as_dense, gradient_predivide_factor, op,
                               backward_passes_per_step, average_aggregated_gradients,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError(f"local_layers must be Keras layers, got {type(layer)}")
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def _optimizer_classes(module):
    for value in vars(module).values():
        if isinstance(value, type) and _flavour(value) and value.__name__ != "Optimizer":
            yield value


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False, **kwargs):
    """tf.keras.models.load_model, with the model's optimizer (any optimizer of tf.keras's
    optimizers module, its `legacy` module with legacy_opts, or one of `custom_optimizers`)
    wrapped in DistributedOptimizer and its saved state restored."""
    module = tf.keras.optimizers
    if legacy_opts:
        if not tf.keras.__name__.startswith("tf_keras"):
            raise ValueError("legacy_opts=True needs tf_keras (set TF_USE_LEGACY_KERAS=1): "
                             "Keras 3 has no legacy optimizers")
        module = tf.keras.optimizers.legacy
    options = Options(compression, Average, 1.0, False, False, global_process_set, True)
    objects = {}
    for cls in list(_optimizer_classes(module)) + list(custom_optimizers or []):
        objects[cls.__name__] = _distributed_class(cls, options, 1)[0]
    objects.update(custom_objects or {})
    return tf.keras.models.load_model(filepath, custom_objects=objects, **kwargs)
