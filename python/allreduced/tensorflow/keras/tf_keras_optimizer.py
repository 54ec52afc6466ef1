"""The DistributedOptimizer subclass of a tf_keras optimizer class (TF_USE_LEGACY_KERAS=1:
tf_keras.optimizers.* and tf_keras.optimizers.legacy.*).

apply_gradients reduces the gradients over the ranks, then hands them to the wrapped class's
apply_gradients, which clips them (so clipping sees the global gradient, as with Keras 3) and
updates the variables; model.fit and optimizer.minimize both come through it. tf_keras has no
gradient accumulation of its own, so backward_passes_per_step = N > 1 is done here, with Keras
3's semantics: every call adds the gradients to per-variable accumulators; every Nth call
(counted by a variable of our own) reduces the accumulated sum (or mean, with
average_aggregated_gradients) once, applies it and clears the accumulators. `iterations` counts
the updates, as Keras 3's does with gradient accumulation.
"""
import functools

import tensorflow as tf

from allreduced.tensorflow.gradient_reduction import reduce_gradients
from allreduced.tensorflow.keras.options import rank_state


def _accumulators(optimizer, variables):
    """(calls counter, one accumulator per variable), zero-initialized, created once outside any
    tf.function."""
    state = rank_state(optimizer)
    table = state.accumulators
    with tf.init_scope():
        if state.calls is None:
            state.calls = tf.Variable(0, dtype=tf.int64, trainable=False, name="allreduced_calls")
        for var in variables:
            if id(var) not in table:
                table[id(var)] = tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                             name="allreduced_accumulator")
    return state.calls, [table[id(var)] for var in variables]


@functools.lru_cache(maxsize=None)
def tf_keras_class(base, options, passes):
    """The subclass of `base` (a tf_keras optimizer class) reducing with `options`, applying
    once per `passes` calls."""

    class _Distributed(base):
        _allreduced_wrapped = True

        def register_local_var(self, var):
            """Keeps `var`'s gradient local to each rank (see PartialDistributedOptimizer)."""
            rank_state(self).local_variables.append(var)

        def _reduce(self, grads, variables):
            return reduce_gradients(list(grads), variables,
                                    **options.reduce_kwargs(rank_state(self)))

        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            pairs = list(grads_and_vars)
            grads = [g for g, _ in pairs]
            variables = [v for _, v in pairs]
            apply = super().apply_gradients
            if passes == 1:
                return apply(list(zip(self._reduce(grads, variables), variables)), *args,
                             **kwargs)
            calls, accumulators = _accumulators(self, variables)
            for acc, g in zip(accumulators, grads):
                if g is not None:
                    acc.assign_add(tf.convert_to_tensor(g))
            scale = 1.0 / passes if options.average_aggregated_gradients else 1.0

            def update():
                summed = [None if g is None else acc * tf.cast(scale, acc.dtype)
                          for g, acc in zip(grads, accumulators)]
                apply(list(zip(self._reduce(summed, variables), variables)), *args, **kwargs)
                for acc in accumulators:
                    acc.assign(tf.zeros_like(acc))
                return tf.constant(True)

            tf.cond(tf.equal(calls.assign_add(1) % passes, 0), update,
                    lambda: tf.constant(False))
            return self.iterations

    return options.disguise(_Distributed, base)
