"""Worker scenarios for training: DistributedOptimizer equivalence with one process (plain and with
backward_passes_per_step), save/load of the wrapped optimizer, LearningRateWarmupCallback,
SyncBatchNormalization, PartialDistributedGradientTape, the tf.compat.v1 DistributedOptimizer, and
a rank that raises mid-training. Run through tf_worker.py. The Keras scenarios use `tf.keras`:
Keras 3, or tf_keras when the test sets TF_USE_LEGACY_KERAS=1 (tf_keras_test.py)."""
import os
import sys
import time

import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd
from tf_worker import check

MICRO = 4  # rows per rank per micro-batch


def _model(keras, seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def _data(n, steps):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(n * MICRO * steps, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-1.0], [0.5]], np.float32) + 0.1).astype(np.float32)
    return x, y


def _shard(x, r, n, passes):
    """Rank r's rows: its micro-batch of every block of n * passes micro-batches."""
    blocks = x.reshape(-1, n, passes, MICRO, x.shape[-1])
    return blocks[:, r].reshape(-1, x.shape[-1])


def _weights(model):
    return np.concatenate([w.ravel() for w in model.get_weights()])


def _cases(keras):
    """(SGD class, passes, average, lr): plain, averaged and summed accumulation; with tf_keras
    also its legacy (OptimizerV2) SGD, with summed accumulation (the path with the most of it)."""
    cases = [(keras.optimizers.SGD, passes, average, lr)
             for passes, average, lr in ((1, False, 0.05), (2, True, 0.05), (2, False, 0.025))]
    if keras.__name__.startswith("tf_keras"):
        cases.append((keras.optimizers.legacy.SGD, 2, False, 0.025))
    return cases


def equivalence_scenario():
    """N ranks, each with its 1/N of every batch, train the same weights as one process on the
    whole batch: DistributedOptimizer with model.fit (SGD with momentum), and with
    backward_passes_per_step=2 (averaged, and summed with half the learning rate)."""
    keras = tf.keras

    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r, n = khvd.rank(), khvd.size()
    for sgd, passes, average, lr in _cases(keras):
        x, y = _data(n, steps=6 * passes)
        # Single process: every batch is all ranks' micro-batches of the update.
        single = _model(keras, 3)
        single.compile(optimizer=sgd(0.05, momentum=0.9), loss="mse")
        order = [_shard(x, k, n, passes).reshape(-1, passes * MICRO, 3) for k in range(n)]
        xs = np.concatenate(order, axis=1).reshape(-1, 3)
        ys = np.concatenate([_shard(y, k, n, passes).reshape(-1, passes * MICRO, 1)
                             for k in range(n)], axis=1).reshape(-1, 1)
        single.fit(xs, ys, batch_size=n * passes * MICRO, epochs=2, shuffle=False, verbose=0)
        # Distributed.
        model = _model(keras, 3)
        opt = khvd.DistributedOptimizer(sgd(lr, momentum=0.9),
                                        backward_passes_per_step=passes,
                                        average_aggregated_gradients=average)
        model.compile(optimizer=opt, loss="mse")
        model.fit(_shard(x, r, n, passes), _shard(y, r, n, passes), batch_size=MICRO, epochs=2,
                  shuffle=False, verbose=0)
        got, want = _weights(model), _weights(single)
        check(np.allclose(got, want, atol=2e-5), f"{sgd.__module__} passes={passes} "
              f"average={average}: max diff {np.abs(got - want).max()}")
        # Keras 3 counts the updates; tf_keras, as Horovod's optimizer there, every call.
        legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
        updates = 2 * len(x) // (n * MICRO * (1 if legacy else passes))
        check(int(opt.iterations.numpy()) == updates,
              f"iterations {opt.iterations.numpy()}, expected {updates}")
    khvd.shutdown()


def save_load_scenario():
    """model.fit with the callbacks (warmup included), save with the wrapped optimizer, load it
    back wrapped with its state, train on: identical weights everywhere."""
    keras = tf.keras

    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r, n = khvd.rank(), khvd.size()
    x, y = _data(n, steps=8)
    model = _model(keras, 100 + r)  # different initial weights: the broadcast fixes them
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    seen = []

    class RecordLr(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate.numpy()))

    model.fit(_shard(x, r, n, 1), _shard(y, r, n, 1), batch_size=MICRO, epochs=3, verbose=0,
              callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         khvd.callbacks.MetricAverageCallback(),
                         khvd.callbacks.LearningRateWarmupCallback(0.01, warmup_epochs=2),
                         RecordLr()])
    check(abs(seen[0] - 0.01 / n) < 1e-9, f"warmup starts at lr/size: {seen[0]}")
    check(all(a <= b + 1e-12 for a, b in zip(seen, seen[1:])), "warmup increases")
    check(abs(seen[-1] - 0.01) < 1e-9, f"lr after warmup {seen[-1]}")
    path = os.path.join(os.environ["ALLREDUCED_TEST_DIR"], "model.keras")
    if r == 0:
        model.save(path)
    hvd.barrier()
    loaded = khvd.load_model(path)
    check(getattr(loaded.optimizer, "_allreduced_wrapped", False), "loaded optimizer is wrapped")
    check(type(loaded.optimizer).__name__ == "Adam", "loaded optimizer class name")
    check(int(loaded.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()),
          "optimizer state restored")
    check(np.allclose(_weights(loaded), _weights(model)), "weights restored")
    plain = keras.models.load_model(path)  # loads without allreduced as a plain Adam
    check(not getattr(plain.optimizer, "_allreduced_wrapped", False), "plain load")
    loaded.fit(_shard(x, r, n, 1), _shard(y, r, n, 1), batch_size=MICRO, epochs=1, verbose=0)
    flat = _weights(loaded)
    everyone = hvd.allgather(tf.constant(flat[None, :]), name="saved.weights").numpy()
    check(np.all(everyone == everyone[0]), "weights differ after training the loaded model")
    hvd.shutdown()


def layers_scenario():
    """SyncBatchNormalization uses the global batch's moments; PartialDistributedGradientTape keeps
    local layers' gradients local; the tf.compat.v1 DistributedOptimizer averages gradients."""
    import keras
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x = np.arange(8, dtype=np.float32).reshape(4, 2) + 10.0 * r
    everyone = np.concatenate([np.arange(8, dtype=np.float32).reshape(4, 2) + 10.0 * k
                               for k in range(n)])
    bn = hvd.SyncBatchNormalization(momentum=0.0, epsilon=1e-3)
    out = bn(tf.constant(x), training=True).numpy()
    mean, var = everyone.mean(axis=0), everyone.var(axis=0)
    check(np.allclose(out, (x - mean) / np.sqrt(var + 1e-3), atol=1e-4), "sync batch norm")
    check(np.allclose(bn.moving_mean.numpy(), mean, atol=1e-4), "sync batch norm moving mean")
    # PartialDistributedGradientTape: the local layer's gradient is this rank's / size.
    keras.utils.set_random_seed(5)
    shared, local = keras.layers.Dense(1), keras.layers.Dense(1)
    inp = tf.constant([[float(r + 1)]])
    shared(inp), local(inp)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared(inp) + local(inp))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    gs, gl = tape.gradient(loss, [shared.kernel, local.kernel])
    check(np.allclose(gs.numpy(), sum(range(1, n + 1)) / n), f"shared grad {gs.numpy()}")
    check(np.allclose(gl.numpy(), (r + 1) / n), f"local grad {gl.numpy()}")
    # tf.compat.v1 optimizer: the step uses the average gradient.
    v = tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
    opt.minimize(lambda: v * float(r + 1), var_list=[v])
    check(np.allclose(v.numpy(), -0.5 * sum(range(1, n + 1)) / n), f"v1 optimizer {v.numpy()}")
    hvd.shutdown()


def raise_scenario():
    """Rank 1 raises in its third training batch; the others must fail promptly, naming it."""
    import keras

    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r, n = khvd.rank(), khvd.size()
    x, y = _data(n, steps=50)

    class Boom(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if r == 1 and batch == 3:
                raise RuntimeError("rank 1 raised on purpose")

    model = _model(keras, 1)
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    start = time.monotonic()
    try:
        model.fit(_shard(x, r, n, 1), _shard(y, r, n, 1), batch_size=MICRO, epochs=1, verbose=0,
                  callbacks=[Boom()])
    except tf.errors.OpError as e:
        print(f"ERROR {type(e).__name__} after {time.monotonic() - start:.1f}s: {e.message}",
              flush=True)
        sys.exit(3)
    check(False, "training finished although rank 1 raised")


def aggregation_scenario():
    """tf_keras, as Horovod's tests use it: backward_passes_per_step=4 through _compute_gradients
    and apply_gradients in a tf.function (an IndexedSlices gradient, sparse_as_dense), summed and
    averaged, with a local variable whose gradient differs per rank (scaled by 1/size, as
    Horovod's scale_local_gradients); `iterations` counts every
    call and `_agg_helper.counter` the calls since the last update; an inf gradient lasts one
    cycle only."""
    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r, n, passes = khvd.rank(), khvd.size(), 4
    for average in (False, True):
        opt = khvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), sparse_as_dense=True,
                                        backward_passes_per_step=passes,
                                        average_aggregated_gradients=average)
        x, y, z = tf.Variable([0.0]), tf.Variable([1.0, 2.0]), tf.Variable([0.0])
        opt.register_local_var(z)

        def loss():  # d/dx 1, d/dy [-1, 0] (a gather: IndexedSlices), d/dz rank + 1
            return x - tf.gather(y, [0]) + z * float(r + 1)

        @tf.function
        def step():
            opt.apply_gradients(opt._compute_gradients(loss, var_list=[x, y, z]))

        for idx in range(10):
            step()
            k = (idx + 1) // passes * (1 if average else passes)  # passes' worth of gradients
            check(np.allclose(x.numpy(), [-k]) and np.allclose(y.numpy(), [1.0 + k, 2.0])
                  and np.allclose(z.numpy(), [-k * (r + 1) / n]),  # Horovod scales local ones
                  f"average={average} step {idx}: x {x.numpy()} y {y.numpy()} z {z.numpy()}")
            check(int(opt.iterations.numpy()) == idx + 1, f"iterations {opt.iterations.numpy()}")
        check(int(opt._agg_helper.counter.numpy()) == 10 % passes,
              f"counter {opt._agg_helper.counter.numpy()}")
    opt = khvd.DistributedOptimizer(tf.keras.optimizers.SGD(), backward_passes_per_step=2)
    check(khvd.DistributedOptimizer(tf.keras.optimizers.SGD())._agg_helper is None, "no helper")
    w, calls = tf.Variable(0.0), tf.Variable(0)

    def inf_first():
        calls.assign_add(1)
        return tf.cond(calls > 1, lambda: w, lambda: w * float("inf"))

    for _ in range(4):
        grads = opt._compute_gradients(inf_first, var_list=[w])
        opt.apply_gradients(grads)
    check(bool(tf.math.is_finite(grads[0][0])), f"last gradient {grads[0][0]}")
    from allreduced.tensorflow.keras.options import rank_state
    acc = list(rank_state(opt).accumulators.values())
    check(all(bool(tf.reduce_all(tf.math.is_finite(a))) for a in acc), "accumulators cleared")
    khvd.shutdown()


SCENARIOS = {"aggregation": aggregation_scenario, "equivalence": equivalence_scenario,
             "save_load": save_load_scenario,
             "layers": layers_scenario, "raise": raise_scenario}
