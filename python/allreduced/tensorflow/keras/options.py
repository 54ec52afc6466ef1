"""What a Keras DistributedOptimizer was asked to do (hashable, so one subclass is made per
optimizer class and options), and the per-instance state its methods share. Used by the Keras 3
and the tf_keras subclasses alike."""
import collections


class Options(collections.namedtuple(
        "Options", ["compression", "op", "gradient_predivide_factor", "sparse_as_dense",
                    "average_aggregated_gradients", "process_set", "scale_local_gradients"])):

    def reduce_kwargs(self, state):
        """reduce_gradients' keyword arguments, the instance's local variables included."""
        return dict(compression=self.compression, op=self.op,
                    gradient_predivide_factor=self.gradient_predivide_factor,
                    sparse_as_dense=self.sparse_as_dense, process_set=self.process_set,
                    local_variables=state.local_variables,
                    scale_local_gradients=self.scale_local_gradients,
                    name="DistributedOptimizer")

    @staticmethod
    def disguise(cls, base):
        """Gives the subclass the wrapped class's name and module, so a saved model names a plain
        Keras optimizer and loads anywhere (load_model wraps it again)."""
        cls.__name__ = base.__name__
        cls.__qualname__ = base.__qualname__
        cls.__module__ = base.__module__
        return cls


class _RankState:
    """Plain Python state of one wrapped optimizer: not a Keras or TensorFlow trackable, so it is
    neither saved with the optimizer nor counted among its variables."""

    def __init__(self):
        self.local_variables = []  # gradients kept local (register_local_var)
        self.variables = None  # Keras 3: the variables of the gradients being applied
        # tf_keras, backward_passes_per_step > 1: id(var) -> accumulator, and the
        # GradientAggregation (`_agg_helper`).
        self.accumulators = {}
        self.aggregation = None


def rank_state(optimizer):
    state = optimizer.__dict__.get("_allreduced_state")
    if state is None:
        state = _RankState()
        # Past Keras's and TensorFlow's attribute tracking on purpose (see _RankState).
        object.__setattr__(optimizer, "_allreduced_state", state)
    return state
