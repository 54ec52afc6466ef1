"""The DistributedOptimizer subclass of a Keras 3 optimizer class (keras.optimizers.*).

Gradients are reduced over the ranks right before the optimizer clips them and updates the
variables (`_clip_gradients`, which Keras calls with the final gradients on every update step:
plain steps and, with gradient accumulation, only the steps that apply the accumulated
gradients). So clipping sees the global gradient, and `backward_passes_per_step` is Keras's own
`gradient_accumulation_steps`: the accumulators are optimizer variables inside the compiled step,
and ranks communicate once per update. `_backend_apply_gradients`, which Keras calls with the
variables in the gradients' order, records them so that local variables
(PartialDistributedOptimizer) can be told apart.
"""
import functools

from allreduced.tensorflow.gradient_reduction import reduce_gradients
from allreduced.tensorflow.keras.options import rank_state


@functools.lru_cache(maxsize=None)
def keras3_class(base, options):
    """The subclass of `base` (a Keras 3 optimizer class) reducing with `options`."""

    class _Distributed(base):
        _allreduced_wrapped = True

        def register_local_var(self, var):
            """Keeps `var`'s gradient local to each rank (see PartialDistributedOptimizer)."""
            rank_state(self).local_variables.append(var)

        def _backend_apply_gradients(self, grads, trainable_variables):
            rank_state(self).variables = list(trainable_variables)
            return super()._backend_apply_gradients(grads, trainable_variables)

        def _clip_gradients(self, grads):
            state = rank_state(self)
            grads = reduce_gradients(list(grads), state.variables, **options.reduce_kwargs(state))
            steps = self.gradient_accumulation_steps
            if steps and not options.average_aggregated_gradients:
                # Keras averages the accumulated passes; Horovod's default sums them.
                grads = [None if g is None else g * steps for g in grads]
            return super()._clip_gradients(grads)

    return options.disguise(_Distributed, base)
