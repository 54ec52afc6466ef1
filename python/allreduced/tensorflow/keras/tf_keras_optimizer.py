"""The DistributedOptimizer subclass of a tf_keras optimizer class (TF_USE_LEGACY_KERAS=1:
tf_keras.optimizers.* and tf_keras.optimizers.legacy.*).

apply_gradients reduces the gradients over the ranks, then hands them to the wrapped class's
apply_gradients, which clips them (so clipping sees the global gradient, as with Keras 3) and
updates the variables; model.fit and optimizer.minimize both come through it. tf_keras has no
gradient accumulation of its own, so backward_passes_per_step = N > 1 is done here, as Horovod's
tf_keras optimizer does it: every call adds the gradients to per-variable accumulators (an
IndexedSlices gradient densely); every Nth call reduces the accumulated sum (or mean, with
average_aggregated_gradients) once, applies it and clears the accumulators (set to zero, so an
inf or NaN gradient does not outlive its cycle); `iterations` counts every call, and
`_agg_helper.counter` the calls since the last update. `_compute_gradients(loss, var_list,
grad_loss=None, tape=None)` is Horovod's hook too: the local gradients, which apply_gradients
reduces.
"""
import functools

import tensorflow as tf

from allreduced.tensorflow.gradient_reduction import reduce_gradients
from allreduced.tensorflow.keras.options import rank_state


class GradientAggregation:
    """Horovod's `optimizer._agg_helper` (backward_passes_per_step > 1): `counter`, the calls of
    apply_gradients since the last update, and the options. A variable of our own, created once
    outside any tf.function and not saved with the optimizer."""

    def __init__(self, passes, average):
        self.backward_passes_per_step = passes
        self.average_aggregated_gradients = average
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                       name="allreduced_aggregation_counter")


def _accumulators(optimizer, variables):
    """One accumulator per variable, zero-initialized, created once outside any tf.function."""
    table = rank_state(optimizer).accumulators
    with tf.init_scope():
        for var in variables:
            if id(var) not in table:
                table[id(var)] = tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                             name="allreduced_accumulator")
    return [table[id(var)] for var in variables]


@functools.lru_cache(maxsize=None)
def tf_keras_class(base, options, passes):
    """The subclass of `base` (a tf_keras optimizer class) reducing with `options`, applying
    once per `passes` calls."""

    class _Distributed(base):
        _allreduced_wrapped = True

        def register_local_var(self, var):
            """Keeps `var`'s gradient local to each rank (see PartialDistributedOptimizer)."""
            rank_state(self).local_variables.append(var)

        @property
        def _agg_helper(self):
            """Horovod's aggregation helper (GradientAggregation), None without aggregation."""
            if passes == 1:
                return None
            state = rank_state(self)
            if state.aggregation is None:
                state.aggregation = GradientAggregation(passes,
                                                        options.average_aggregated_gradients)
            return state.aggregation

        def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
            """Horovod's hook: [(local gradient, variable)] of `loss` (a tensor with `tape`, or
            a callable); apply_gradients reduces them."""
            legacy = getattr(super(), "_compute_gradients", None)
            if legacy is not None:  # tf_keras.optimizers.legacy.*
                return legacy(loss, var_list, grad_loss=grad_loss, tape=tape)
            return self.compute_gradients(loss, var_list, tape=tape)

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
            counter = self._agg_helper.counter
            accumulators = _accumulators(self, variables)
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
                counter.assign(0)
                return tf.constant(True)

            def skip():  # Horovod's: `iterations` counts this call too
                self.iterations.assign_add(1)
                return tf.constant(False)

            tf.cond(tf.equal(counter.assign_add(1), passes), update, skip)
            return self.iterations

    return options.disguise(_Distributed, base)
