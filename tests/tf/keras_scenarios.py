"""Worker scenarios for the rest of allreduced.tensorflow.keras, with the Keras that `tf.keras`
names (Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1): PartialDistributedOptimizer,
callbacks.BestModelCheckpoint, alltoall, join, broadcast_global_variables (graph mode with
tf_keras, an error in eager mode). Run through tf_worker.py."""
import os

import numpy as np
import tensorflow as tf

from tf_worker import check


def _partial_optimizer(keras, khvd, r, n):
    """One model.fit step, SGD(lr=1) on loss = (shared(x) + local(x)) with x = r + 1 and unit
    kernels: the shared kernel moves by the average gradient, the local one by this rank's own
    gradient divided by the size."""
    x = keras.Input(shape=(1,))
    shared = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    local = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    model = keras.Model(x, keras.layers.Add()([shared(x), local(x)]))
    opt = khvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[local])
    model.compile(optimizer=opt, loss=lambda y_true, y_pred: tf.reduce_sum(y_pred))
    model.fit(np.full((1, 1), r + 1.0, np.float32), np.zeros((1, 1), np.float32), batch_size=1,
              epochs=1, verbose=0)
    ws, wl = float(shared.kernel.numpy()[0, 0]), float(local.kernel.numpy()[0, 0])
    check(abs(ws - (1.0 - (n + 1) / 2.0)) < 1e-6, f"shared kernel {ws}")
    check(abs(wl - (1.0 - (r + 1.0) / n)) < 1e-6, f"local kernel {wl}")


def _broadcast_keeps_local_variables(keras, khvd, r):
    """BroadcastGlobalVariablesCallback(0, local_variables=...) and its register_local_var():
    the shared kernel takes rank 0's value, the local ones keep this rank's (lr 0: fit's own step
    changes nothing)."""
    x = keras.Input(shape=(1,))
    layers = [keras.layers.Dense(1, use_bias=False, kernel_initializer=keras.initializers.Constant(
        float(r))) for _ in range(3)]
    shared, local, registered = layers
    model = keras.Model(x, keras.layers.Add()([layer(x) for layer in layers]))
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    callback = khvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local.kernel)
    callback.register_local_var(registered.kernel)
    model.fit(np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32), batch_size=1, epochs=1,
              verbose=0, callbacks=[callback])
    got = [float(layer.kernel.numpy()[0, 0]) for layer in layers]
    check(got == [0.0, float(r), float(r)], f"shared, local, registered kernels {got}")


def _best_model_checkpoint(keras, khvd):
    """save_best_only by `monitor`: with mode="max" on a falling loss only epoch 1 is the best, so
    the file holds epoch 1's weights. The path is set after construction, as Horovod allows."""
    try:
        khvd.callbacks.BestModelCheckpoint(monitor="loss").on_train_begin()
        check(False, "BestModelCheckpoint trained without a filepath")
    except ValueError as e:
        check("set filepath" in str(e), f"unset filepath message: {e}")
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x = np.random.default_rng(2).normal(size=(64, 2)).astype(np.float32)
    y = x @ np.array([[2.0], [-1.0]], np.float32)
    best = khvd.callbacks.BestModelCheckpoint(monitor="loss", mode="max")
    best.filepath = os.path.join(os.environ["ALLREDUCED_TEST_DIR"], "best.keras")
    epochs = []

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epochs.append((logs["loss"], [w.copy() for w in self.model.get_weights()]))

    model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[best, Record()])
    losses = [loss for loss, _ in epochs]
    check(losses[0] > losses[1] > losses[2], f"loss falls: {losses}")
    saved = keras.models.load_model(best.filepath).get_weights()
    check(all(np.array_equal(a, b) for a, b in zip(saved, epochs[0][1])),
          "the file holds the best (first) epoch's weights")


def keras_api_scenario():
    keras = tf.keras
    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r, n = khvd.rank(), khvd.size()
    _partial_optimizer(keras, khvd, r, n)
    _broadcast_keeps_local_variables(keras, khvd, r)
    if r == 0:
        _best_model_checkpoint(keras, khvd)
    got = khvd.alltoall(tf.fill([n, 1], r), name="keras.alltoall")
    got = got[0] if isinstance(got, (tuple, list)) else got
    check(list(got.numpy()[:, 0]) == list(range(n)), f"alltoall {got.numpy()}")
    try:
        khvd.broadcast_global_variables(0)
        check(False, "broadcast_global_variables ran in eager mode")
    except RuntimeError as e:
        check("broadcast_variables" in str(e), f"eager message: {e}")
    last = khvd.join()
    check(0 <= int(last) < n, f"join returned {last}")
    khvd.shutdown()


def legacy_graph_scenario():
    """tf_keras in graph mode (tf.compat.v1): broadcast_global_variables gives every rank rank 0's
    model and optimizer variables, in Keras's session."""
    tf.compat.v1.disable_eager_execution()
    keras = tf.keras
    check(keras.__name__.startswith("tf_keras"), f"tf.keras is {keras.__name__}")
    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r = khvd.rank()
    keras.utils.set_random_seed(10 + r)  # different weights per rank
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1)),
                  loss="mse")
    khvd.broadcast_global_variables(0)
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    session = tf.compat.v1.keras.backend.get_session()
    everyone = session.run(khvd.allgather(tf.constant(flat[None, :]), name="graph.weights"))
    check(np.all(everyone == everyone[0]), "weights differ after broadcast_global_variables")
    khvd.shutdown()


SCENARIOS = {"keras_api": keras_api_scenario, "legacy_graph": legacy_graph_scenario}
