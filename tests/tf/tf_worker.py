"""One training process for the TensorFlow tests: `python tf_worker.py SCENARIO`, rank info from
the environment like any launcher sets it. Prints `OK <scenario>` when every check passed."""
import sys

import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)


def ops_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    check(0 <= r < n and hvd.local_size() >= 1, "topology")
    x = tf.constant([1.0, 2.0, 3.0]) * (r + 1)
    total = sum(range(1, n + 1))
    s = hvd.allreduce(x, op=hvd.Sum, name="sum")
    check(np.allclose(s.numpy(), np.array([1.0, 2.0, 3.0]) * total), f"sum {s.numpy()}")
    a = hvd.allreduce(x, name="avg")  # Average by default, like Horovod
    check(np.allclose(a.numpy(), np.array([1.0, 2.0, 3.0]) * total / n), f"average {a.numpy()}")
    m = hvd.allreduce(tf.constant([r], dtype=tf.int64), op=hvd.Max, name="max")
    check(m.numpy()[0] == n - 1, "max")
    g = hvd.allgather(tf.fill([r + 1, 2], r), name="gather")
    check(g.shape == (sum(range(1, n + 1)), 2), f"allgather shape {g.shape}")
    b = hvd.broadcast(tf.constant([r, r]), root_rank=n - 1, name="bcast")
    check(list(b.numpy()) == [n - 1, n - 1], "broadcast")
    v = tf.Variable([float(r)] * 4)
    hvd.broadcast_variables([v], root_rank=0)
    check(np.allclose(v.numpy(), 0.0), "broadcast_variables")

    @tf.function
    def graph_step(t):
        return hvd.allreduce(t, op=hvd.Sum)

    check(np.allclose(graph_step(tf.ones([5])).numpy(), n), "allreduce inside tf.function")
    with tf.GradientTape() as tape:
        w = tf.constant([2.0, 3.0])
        tape.watch(w)
        y = tf.reduce_sum(hvd.allreduce(w * w, op=hvd.Sum, name="grad"))
    dw = tape.gradient(y, w)
    check(np.allclose(dw.numpy(), 2 * np.array([2.0, 3.0]) * n), f"gradient {dw.numpy()}")
    check(int(hvd.rank_op().numpy()) == r and int(hvd.size_op().numpy()) == n, "rank_op/size_op")
    with tf.GradientTape() as tape:
        z = tf.constant([[1.0, 2.0]] * (r + 1))
        tape.watch(z)
        gathered = hvd.allgather(z, name="gather-grad")
        loss = tf.reduce_sum(gathered * 3.0)
    check(np.allclose(tape.gradient(loss, z).numpy(), 3.0), "allgather gradient (averaged)")
    with tf.GradientTape() as tape:
        q = tf.constant([1.0, 1.0])
        tape.watch(q)
        loss = tf.reduce_sum(hvd.broadcast(q, root_rank=0, name="bcast-grad") * 2.0)
    expected = 2.0 if r == 0 else 0.0  # Horovod: the average reaches the root
    check(np.allclose(tape.gradient(loss, q).numpy(), expected), "broadcast gradient")
    try:
        hvd.allreduce(tf.zeros([r + 2]), name="mismatch")
        check(False, "mismatched shapes were accepted")
    except tf.errors.FailedPreconditionError as e:
        check("Mismatched ALLREDUCE tensor shapes" in str(e), f"mismatch message: {e}")
    hvd.shutdown()


def more_ops_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # grouped_allreduce: several tensors (different dtypes) as one group, in eager mode.
    a, b = hvd.grouped_allreduce([tf.fill([3], float(r)), tf.fill([2], r)], op=hvd.Sum)
    check(np.allclose(a.numpy(), sum(range(n))) and list(b.numpy()) == [sum(range(n))] * 2,
          "grouped_allreduce")
    # alltoall with splits: rank r sends (d + 1) rows to rank d, each row holding r.
    splits = [d + 1 for d in range(n)]
    out, received = hvd.alltoall(tf.fill([sum(splits), 2], r), splits=splits, name="a2a")
    check(list(received.numpy()) == [r + 1] * n, f"alltoall splits {received.numpy()}")
    check(list(out.numpy()[:, 0]) == [s for s in range(n) for _ in range(r + 1)], "alltoall data")
    # reducescatter: rows of the sum, first ranks one row more.
    rows = 2 * n + 1
    part = hvd.reducescatter(tf.ones([rows, 3]), op=hvd.Sum, name="rs")
    check(part.shape[0] == rows // n + (1 if r < rows % n else 0), f"reducescatter {part.shape}")
    check(np.allclose(part.numpy(), n), "reducescatter values")
    hvd.barrier()
    # join: every rank but the last joins at once; the last allreduces alone, the others
    # contribute nothing (Sum of only its value).
    if r == n - 1:
        s = hvd.allreduce(tf.constant([5.0]), op=hvd.Sum, name="after-join")
        check(np.allclose(s.numpy(), 5.0), f"allreduce with joined ranks {s.numpy()}")
    last = hvd.join()
    check(last == n - 1, f"join returned {last}")
    hvd.shutdown()


def tape_scenario():
    """A linear model trained with DistributedGradientTape on each rank's own data shard ends with
    the same weights on every rank, equal to training on the whole batch in one process."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    rng = np.random.default_rng(7)
    x_all = rng.normal(size=(8 * n, 3)).astype(np.float32)
    y_all = x_all @ np.array([[1.5], [-2.0], [0.5]], dtype=np.float32) + 0.25
    shard = slice(r * 8, (r + 1) * 8)

    def train(x, y, distributed):
        w = tf.Variable(tf.zeros([3, 1]))
        b = tf.Variable(tf.zeros([1]))
        opt = tf.keras.optimizers.SGD(learning_rate=0.1)

        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(x @ w + b - y))
            if distributed:
                tape = hvd.DistributedGradientTape(tape)  # Horovod's idiom: wrap the tape
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))

        run = tf.function(step) if compiled else step
        for _ in range(20):
            run()
        return np.concatenate([w.numpy().ravel(), b.numpy()])

    for compiled in (False, True):
        distributed = train(x_all[shard], y_all[shard], True)
        single = train(x_all, y_all, False)
        check(np.allclose(distributed, single, atol=1e-5),
              f"weights (tf.function={compiled}) {distributed} vs {single}")
    everyone = hvd.allgather(tf.constant(distributed[None, :]), name="weights").numpy()
    check(np.all(everyone == everyone[0]), "weights differ between ranks")
    check(not hvd.mpi_built() and hvd.nccl_built() == hvd.cuda_built(), "*_built")
    hvd.shutdown()


def fit_scenario():
    """model.fit with DistributedOptimizer and the callbacks: every rank ends with identical
    weights and averaged metrics."""
    import keras

    import allreduced.tensorflow.keras as khvd
    khvd.init()
    r = khvd.rank()
    rng = np.random.default_rng(100 + r)  # each rank its own data
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    keras.utils.set_random_seed(r)  # different initial weights: the broadcast must fix that
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    opt = khvd.DistributedOptimizer(keras.optimizers.Adam(0.01))
    model.compile(optimizer=opt, loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0,
                        callbacks=[khvd.BroadcastGlobalVariablesCallback(0),
                                   khvd.MetricAverageCallback()])
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    everyone = khvd.allgather(tf.constant(flat[None, :]), name="fit.weights").numpy()
    check(np.all(everyone == everyone[0]), "weights differ between ranks after fit")
    losses = khvd.allgather(tf.constant([history.history["loss"][-1]]), name="fit.loss").numpy()
    check(np.allclose(losses, losses[0]), f"metric averages differ: {losses}")
    check(type(model.optimizer).__name__ == "Adam", "wrapped optimizer keeps its class name")
    khvd.shutdown()


if __name__ == "__main__":
    import adasum_scenarios
    import api_scenarios
    import gpu_scenarios
    import horovod_scenarios
    import keras_scenarios
    import sync_bn_scenarios
    import training_scenarios
    scenarios = {"ops": ops_scenario, "more_ops": more_ops_scenario, "tape": tape_scenario,
                 "fit": fit_scenario}
    scenarios.update(adasum_scenarios.SCENARIOS)
    scenarios.update(api_scenarios.SCENARIOS)
    scenarios.update(training_scenarios.SCENARIOS)
    scenarios.update(gpu_scenarios.SCENARIOS)
    scenarios.update(horovod_scenarios.SCENARIOS)
    scenarios.update(keras_scenarios.SCENARIOS)
    scenarios.update(sync_bn_scenarios.SCENARIOS)
    scenarios[sys.argv[1]]()
    print(f"OK {sys.argv[1]}", flush=True)
