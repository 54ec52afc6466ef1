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
    try:
        hvd.allreduce(tf.zeros([r + 2]), name="mismatch")
        check(False, "mismatched shapes were accepted")
    except tf.errors.FailedPreconditionError as e:
        check("Mismatched ALLREDUCE tensor shapes" in str(e), f"mismatch message: {e}")
    hvd.shutdown()


if __name__ == "__main__":
    {"ops": ops_scenario}[sys.argv[1]]()
    print(f"OK {sys.argv[1]}", flush=True)
