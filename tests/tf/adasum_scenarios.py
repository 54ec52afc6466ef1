"""op=hvd.Adasum through the TensorFlow plugin, checked against Horovod's formula written plainly
in numpy: allreduce of every float dtype, a grouped allreduce, DistributedGradientTape with
op=Adasum, and the refusals (an integer tensor, IndexedSlices). Ranks print a digest of each
result so the test can compare them bit for bit."""
import hashlib

import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd
from tf_worker import check


def adasum_pair(a, b):
    dot, aa, bb = float(np.dot(a.ravel(), b.ravel())), float(np.dot(a.ravel(), a.ravel())), \
        float(np.dot(b.ravel(), b.ravel()))
    ca = 1.0 - dot / (2 * aa) if aa != 0 else 1.0
    cb = 1.0 - dot / (2 * bb) if bb != 0 else 1.0
    return ca * a + cb * b


def adasum_tree(vectors):
    """Pairs (0,1), (2,3), ...; an odd last one moves up; until one is left (a power-of-two
    number of ranks per host: the daemon's tree for any number of such hosts)."""
    while len(vectors) > 1:
        pairs = [adasum_pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors) - 1, 2)]
        vectors = pairs + ([vectors[-1]] if len(vectors) % 2 else [])
    return vectors[0]


def digest(name, t):
    print(f"DIGEST {name} {hashlib.sha1(t.numpy().tobytes()).hexdigest()}", flush=True)


def adasum_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    check(hvd.Adasum not in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product), "constant")
    inputs = [np.random.default_rng(100 + k).uniform(-1, 1, (3, 5)) for k in range(n)]
    want = adasum_tree([x.astype(np.float64) for x in inputs])
    for dtype, rtol in ((tf.float16, 1e-2), (tf.float32, 1e-5), (tf.float64, 1e-12)):
        mine = tf.constant(inputs[r], dtype)
        exact = adasum_tree([tf.constant(x, dtype).numpy().astype(np.float64) for x in inputs])
        out = hvd.allreduce(mine, op=hvd.Adasum, name=f"adasum.{dtype.name}")
        check(out.dtype == dtype and out.shape == (3, 5), f"{dtype.name} shape")
        check(np.allclose(out.numpy().astype(np.float64), exact, rtol=rtol, atol=rtol),
              f"{dtype.name}: {out.numpy()} vs {exact}")
        digest(f"adasum.{dtype.name}", out)
    outs = hvd.grouped_allreduce([tf.constant(inputs[r]), tf.constant(2 * inputs[r])],
                                 op=hvd.Adasum, name="adasum.group")
    check(np.allclose(outs[0].numpy(), want) and np.allclose(outs[1].numpy(), 2 * want),
          "grouped allreduce")
    digest("adasum.group", outs[1])

    @tf.function
    def in_graph(t):
        return hvd.allreduce(t, op=hvd.Adasum, name="adasum.graph")

    check(np.allclose(in_graph(tf.constant(inputs[r])).numpy(), want), "inside tf.function")

    # DistributedGradientTape(op=Adasum) reduces the gradients with Adasum, like Horovod's.
    w = tf.Variable(np.ones((3, 5)))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * tf.constant(inputs[r]))  # gradient = this rank's input
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    (grad,) = tape.gradient(loss, [w])
    check(np.allclose(grad.numpy(), want), f"tape gradient {grad.numpy()} vs {want}")
    digest("adasum.tape", grad)

    try:
        hvd.allreduce(tf.constant([r, 1], tf.int32), op=hvd.Adasum, name="adasum.int32")
        check(False, "Adasum of int32 did not raise")
    except tf.errors.InvalidArgumentError as e:
        check("needs float16, float32 or float64, not int32" in str(e), str(e))
    try:
        hvd.allreduce(tf.IndexedSlices(tf.ones([1, 3]), tf.constant([r])), op=hvd.Adasum)
        check(False, "Adasum of IndexedSlices did not raise")
    except NotImplementedError:
        pass
    after = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="adasum.after")
    check(np.allclose(after.numpy(), n), "the job goes on")
    hvd.shutdown()


SCENARIOS = {"adasum": adasum_scenario}
