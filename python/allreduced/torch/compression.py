"""Horovod's gradient compression for PyTorch (allreduced.common.compression)."""
import torch

from allreduced.common.compression import fp16_compression

Compression = fp16_compression(torch.float16, lambda t: t.dtype.is_floating_point,
                               lambda t, dtype: t.type(dtype))
NoneCompressor = Compression.none
FP16Compressor = Compression.fp16
