"""SyncBatchNormalization: batch normalization whose training-time mean and variance are computed
over the whole global batch (every rank's), like Horovod's. Inference uses the moving statistics,
as the Keras layer does.

Like Horovod's, it is a subclass of the BatchNormalization that `tf.keras` names when this module
is imported: Keras 3's, or tf_keras's under TF_USE_LEGACY_KERAS=1 (so it fits the models, and in
graph mode the sessions, of that Keras). The two hook into their base differently: Keras 3 asks
`_moments(inputs, mask)`, tf_keras `_calculate_mean_and_var(inputs, axes, keep_dims, mask)`."""
import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Sum
from allreduced.tensorflow.collectives import allreduce

_BatchNormalization = tf.keras.layers.BatchNormalization
_TF_KERAS = _BatchNormalization.__module__.startswith("tf_keras")


def _global_moments(name, inputs, axes, keep_dims, mask):
    """(mean, variance) of `inputs` over `axes` and over every rank's batch; with `mask` (Keras's
    per-timestep mask, inputs' shape without the channel axis) only unmasked rows count. One
    allreduce of [sum, sum of squares, count] per call, named after the layer."""
    x = inputs
    if x.dtype in (tf.float16, tf.bfloat16):
        x = tf.cast(x, tf.float32)
    if mask is None:
        weights = tf.ones_like(x)
    else:
        weights = tf.broadcast_to(tf.cast(tf.expand_dims(mask, -1), x.dtype), tf.shape(x))
    local_sum = tf.reduce_sum(weights * x, axis=axes, keepdims=keep_dims)
    local_squares = tf.reduce_sum(weights * tf.square(x), axis=axes, keepdims=keep_dims)
    local_count = tf.reduce_sum(weights, axis=axes, keepdims=keep_dims)
    stacked = tf.stack([local_sum, local_squares, local_count])
    total, squares, count = tf.unstack(allreduce(stacked, op=Sum, name=f"{name}.sync_bn"))
    count = tf.maximum(count, 1.0)  # a channel no rank saw unmasked: mean and variance 0
    mean = total / count
    variance = tf.maximum(squares / count - tf.square(mean), 0.0)
    return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)


def _synchronized():
    return basics.is_initialized() and basics.size() > 1


class SyncBatchNormalization(_BatchNormalization):
    """BatchNormalization with global-batch statistics in training. `fused` must stay False (the
    fused kernel computes local statistics), as in Horovod."""

    def __init__(self, fused=False, **kwargs):
        if fused is None or fused:
            raise ValueError("SyncBatchNormalization does not support fused=True")
        if kwargs.pop("synchronized", False):
            raise ValueError("SyncBatchNormalization is always synchronized over allreduced ranks")
        if _TF_KERAS:
            kwargs["fused"] = False
        super().__init__(**kwargs)

    if _TF_KERAS:

        def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
            if not _synchronized():
                return super()._calculate_mean_and_var(inputs, reduction_axes, keep_dims, mask)
            return _global_moments(self.name, inputs, list(reduction_axes), keep_dims, mask)

    else:

        def _moments(self, inputs, mask):
            if not _synchronized():
                return super()._moments(inputs, mask)
            return _global_moments(self.name, inputs, list(self._reduction_axes), False, mask)
