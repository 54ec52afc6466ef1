"""Elastic training with Keras (Horovod's hvd.elastic under horovod.tensorflow.keras): KerasState
and the callbacks that keep it current during model.fit; `run` is allreduced.tensorflow.elastic's.
The callbacks subclass the Callback of the Keras that `tf.keras` names, as the other callbacks do:
Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1 (model.fit refuses another Keras's callbacks).
"""
import tensorflow as tf

from allreduced.tensorflow.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                                           TensorFlowKerasState, run)


class KerasState(TensorFlowKerasState):
    """State of a built Keras model and its optimizer, plus keyword objects (e.g. epoch, batch)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(tf.keras.callbacks.Callback):
    """Commits `state` every `batches_per_commit` batches and at the end of each epoch."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # alike on every rank after a reset

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(tf.keras.callbacks.Callback):
    """Keeps `state.batch` at the last finished batch of the epoch (0 after an epoch). With
    `steps_per_epoch`, the first epoch after a reset runs only the batches not done yet."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self.steps_per_epoch is None:
                self.steps_per_epoch = steps
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(tf.keras.callbacks.Callback):
    """Keeps `state.epoch` as the number of epochs finished, counted across resets."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "KerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
