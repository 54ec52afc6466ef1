"""Horovod's gradient compression for TensorFlow (allreduced.common.compression)."""
import tensorflow as tf

from allreduced.common.compression import fp16_compression

Compression = fp16_compression(tf.float16, lambda t: t.dtype.is_floating, tf.cast)
NoneCompressor = Compression.none
FP16Compressor = Compression.fp16
