"""DistributedGradientTape and PartialDistributedGradientTape: wrap a tf.GradientTape so that
gradient() returns gradients reduced over the ranks, like Horovod's."""
import tensorflow as tf

from allreduced.tensorflow.basics import Average
from allreduced.tensorflow.compression import Compression
from allreduced.tensorflow.gradient_reduction import reduce_gradients
from allreduced.tensorflow.process_sets import global_process_set


class _DistributedGradientTape:
    """The wrapped tape with gradient() overridden; everything else goes to the tape."""

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if not isinstance(gradtape, tf.GradientTape):
            raise TypeError("DistributedGradientTape wraps a tf.GradientTape: "
                            "hvd.DistributedGradientTape(tape)")
        self._tape = gradtape
        self._options = dict(compression=compression, op=op,
                             gradient_predivide_factor=gradient_predivide_factor,
                             sparse_as_dense=sparse_as_dense, process_set=process_set,
                             scale_local_gradients=scale_local_gradients)
        self._local_sources = []

    def register_local_source(self, source):
        """Gradients of `source` (a variable) stay local: not reduced over the ranks."""
        self._local_sources.append(source)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE, use_generic_names=False):
        """The wrapped tape's gradients, reduced over the ranks (local sources' only scaled).
        `use_generic_names` is accepted for Horovod's signature and has no effect."""
        grads = self._tape.gradient(target, sources, output_gradients, unconnected_gradients)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        flat_sources = tf.nest.flatten(sources, expand_composites=False)
        reduced = reduce_gradients(flat_grads, flat_sources, local_variables=self._local_sources,
                                   name="DistributedGradientTape", **self._options)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """gradient(), split into ([(local source, gradient)], [(other source, gradient)])."""
        grads = self.gradient(target, sources, output_gradients)
        local_ids = {id(v) for v in self._local_sources}
        local, others = [], []
        for source, grad in zip(sources, grads):
            (local if id(source) in local_ids else others).append((source, grad))
        return local, others

    def __getattr__(self, attr):
        return getattr(self._tape, attr)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps `gradtape`: its gradient() averages (or `op`-reduces) every gradient over the ranks
    of `process_set`."""
    return _DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                    sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                    groups, process_set, scale_local_gradients)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, local_layers=None,
                                   process_set=global_process_set, scale_local_gradients=True):
    """A DistributedGradientTape whose `local_layers`' (Keras layers) variables keep their local
    gradients."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor,
                                   process_set=process_set,
                                   scale_local_gradients=scale_local_gradients)
    layers = [] if local_layers is None else (
        local_layers if isinstance(local_layers, (list, tuple)) else [local_layers])
    for layer in layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
