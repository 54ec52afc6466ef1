"""Keras callbacks of horovod.tensorflow.keras.callbacks, for the Keras that `tf.keras` names:
Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1 (as Horovod's, they subclass its Callback)."""
import tensorflow as tf

from allreduced.tensorflow import basics
from allreduced.tensorflow.basics import Average
from allreduced.tensorflow.collectives import allreduce, broadcast_variables


def _optimizer_variables(optimizer):
    """An optimizer's variables: a property in Keras 3 and tf_keras, a method in tf_keras's
    legacy optimizers."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _is_variable(value):
    """A tf.Variable, or a Keras 3 variable (which is not one)."""
    return isinstance(value, tf.Variable) or (hasattr(value, "assign") and hasattr(value, "dtype")
                                              and hasattr(value, "shape"))


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Broadcasts the model's (and optimizer's) variables from `root_rank` before the first
    training batch, so every rank starts from the same state. `local_variables` (a variable or a
    collection of them) and variables given to register_local_var() stay as each rank has them
    (a partial distributed optimizer's local layers)."""

    def __init__(self, root_rank=0, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self._done = False
        if local_variables is None:
            local_variables = []
        elif _is_variable(local_variables):
            local_variables = [local_variables]
        local_variables = list(local_variables)
        if not all(_is_variable(v) for v in local_variables):
            raise ValueError("local_variables must be a variable or a collection of them")
        # By identity: Keras 3's variables are not tf.Variables and have no ref().
        self._local = {id(v) for v in local_variables}

    def register_local_var(self, var):
        """Keeps `var` out of the broadcast."""
        self._local.add(id(var))

    def on_train_batch_begin(self, batch, logs=None):
        if self._done:
            return
        broadcast_variables([v for v in self.model.variables if id(v) not in self._local],
                            self.root_rank)
        optimizer = getattr(self.model, "optimizer", None)
        # tf_keras builds an optimizer's slots in the first step: then only what exists now (its
        # step counter) is sent; the slots start equal everywhere and see reduced gradients.
        variables = [] if optimizer is None else _optimizer_variables(optimizer)
        if variables:
            broadcast_variables(variables, self.root_rank)
        self._done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Averages the epoch's metrics over all ranks (logs on every rank show the average). Put it
    before callbacks that read the metrics (checkpointing, early stopping, logging)."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for key in sorted(logs):
            value = tf.constant(float(logs[key]), dtype=tf.float64)
            logs[key] = float(allreduce(value, op=Average, name=f"metric.{key}").numpy())


class LearningRateScheduleCallback(tf.keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) between start_epoch and end_epoch,
    per epoch (staircase) or per batch with a fractional epoch. `multiplier` is a number or a
    function of the epoch. The optimizer's learning rate must be a variable (not a schedule).
    momentum_correction is accepted for Horovod compatibility and has no effect: a Keras
    optimizer's momentum is a constant of the compiled training step."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch = 0

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set(self, epoch):
        lr = self.initial_lr * self.multiplier(epoch)
        self.model.optimizer.learning_rate.assign(lr)
        return lr

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if self.staircase and self._in_range(epoch):
            lr = self._set(epoch)
            if self.verbose and basics.rank() == 0:
                print(f"Epoch {epoch + 1}: learning rate set to {lr:.6g}")

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self.steps_per_epoch or not self._in_range(self._epoch):
            return
        self._set(self._epoch + float(batch) / self.steps_per_epoch)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over the first warmup_epochs
    epochs, batch by batch (the large-batch warmup of Goyal et al., as Horovod does)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            size = basics.size()
            return (epoch * (size - 1) / warmup_epochs + 1) / size

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            self.model.optimizer.learning_rate.assign(self.initial_lr)
            if self.verbose and basics.rank() == 0:
                print(f"Epoch {epoch + 1}: finished warmup, learning rate {self.initial_lr:.6g}")


class BestModelCheckpoint(tf.keras.callbacks.ModelCheckpoint):
    """A ModelCheckpoint that keeps only the best model by `monitor` (save_best_only). As in
    Horovod, the path may be set after construction (`callback.filepath = ...`), as long as it is
    before training; add it on one rank (usually 0) only, like any checkpoint."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        # Keras 3 checks the path's extension here; an unset path is checked in on_train_begin.
        placeholder = "unset.weights.h5" if save_weights_only else "unset.keras"
        super().__init__(filepath=filepath or placeholder, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)
        self.filepath = filepath

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise ValueError("BestModelCheckpoint: set filepath before training")
        super().on_train_begin(logs)
