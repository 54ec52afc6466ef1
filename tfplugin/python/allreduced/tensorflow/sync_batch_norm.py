"""SyncBatchNormalization: batch normalization whose training-time mean and variance are computed
over the whole global batch (every rank's), like Horovod's. Inference uses the moving statistics,
as the Keras layer does."""
import keras
import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Sum
from allreduced.tensorflow.collectives import allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    def __init__(self, **kwargs):
        if kwargs.pop("synchronized", False):
            raise ValueError("SyncBatchNormalization is always synchronized over allreduced ranks")
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        if mask is not None or not basics.is_initialized() or basics.size() == 1:
            return super()._moments(inputs, mask)
        x = inputs
        if x.dtype in (tf.float16, tf.bfloat16):
            x = tf.cast(x, tf.float32)
        axes = list(self._reduction_axes)
        local_sum = tf.reduce_sum(x, axis=axes)
        local_squares = tf.reduce_sum(tf.square(x), axis=axes)
        count = tf.cast(tf.size(x) // tf.size(local_sum), x.dtype)
        # Named per layer, so the three allreduces match across ranks however the step is traced.
        total = allreduce(local_sum, op=Sum, name=f"{self.name}.sync_bn.sum")
        squares = allreduce(local_squares, op=Sum, name=f"{self.name}.sync_bn.squares")
        n = allreduce(count, op=Sum, name=f"{self.name}.sync_bn.count")
        mean = total / n
        variance = tf.maximum(squares / n - tf.square(mean), 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)
