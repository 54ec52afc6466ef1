"""Horovod's gradient compression, framework-neutral: `Compression.none`, or `Compression.fp16`
(floating tensors other than float16 go through the collective as float16 and are cast back to
their type afterwards). Each framework's module names its float16 type and how it tells a floating
tensor and casts one (`fp16_compression`)."""


class NoneCompressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def fp16_compression(float16, is_floating, cast):
    """Horovod's `Compression` namespace for a framework: `float16` its half type,
    `is_floating(tensor)` and `cast(tensor, dtype)` its own."""

    class FP16Compressor:
        @staticmethod
        def compress(tensor):
            if is_floating(tensor) and tensor.dtype != float16:
                return cast(tensor, float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return cast(tensor, ctx) if ctx is not None else tensor

    class Compression:
        none = NoneCompressor
        fp16 = FP16Compressor

    return Compression
