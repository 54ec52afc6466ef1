"""Worker scenarios for behaviours Horovod's own TensorFlow tests check: IndexedSlices reductions
and their errors, alltoall without splits, broadcasts inside a tf.function and in tf.compat.v1
graphs, the names scripts use (timeline, process_set_included_op, broadcast_global_variables,
is_homogeneous), and collectives whose gradient graphs TensorFlow's optimizer could prune on some
ranks only. Run through tf_worker.py."""
import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd
from tf_worker import check


def _raises(exc, fn, what):
    try:
        fn()
    except exc:
        return
    check(False, f"{what}: no {exc.__name__}")


def sparse_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # Average of integer IndexedSlices divides like TensorFlow's `/`: int8 -> float32.
    sl = tf.IndexedSlices(tf.fill([2, 3], tf.constant(4 * (r + 1), tf.int8)), tf.constant([r, r]))
    avg = hvd.allreduce(sl, op=hvd.Average)
    check(avg.values.dtype == tf.float32, f"int8 Average dtype {avg.values.dtype}")
    check(np.allclose(avg.values.numpy()[::2, 0], [4.0 * (k + 1) / n for k in range(n)]),
          f"int8 Average values {avg.values.numpy()[:, 0]}")
    for op in (hvd.Min, hvd.Max, hvd.Product):
        _raises(NotImplementedError, lambda: hvd.allreduce(sl, op=op), f"IndexedSlices op {op}")
        _raises(NotImplementedError, lambda: hvd.grouped_allreduce([sl, tf.ones([1])], op=op),
                f"grouped mixed op {op}")
    _raises(NotImplementedError, lambda: hvd.allreduce(sl, op=hvd.Sum, prescale_factor=0.5),
            "IndexedSlices prescale")
    # A grouped allreduce of slices and dense tensors keeps each kind in its place.
    dense = tf.fill([2], float(r))
    a, b, c = hvd.grouped_allreduce([sl, dense, sl], op=hvd.Sum)
    check(isinstance(a, tf.IndexedSlices) and isinstance(c, tf.IndexedSlices), "slices stay")
    check(list(a.indices.numpy()) == [k for k in range(n) for _ in range(2)], "grouped indices")
    check(np.allclose(b.numpy(), sum(range(n))), f"grouped dense {b.numpy()}")
    # alltoall without splits returns only the tensor; with them, also the received splits.
    out = hvd.alltoall(tf.fill([n, 2], r))
    check(isinstance(out, tf.Tensor) and list(out.numpy()[:, 0]) == list(range(n)), "alltoall")
    got, splits = hvd.alltoall(tf.fill([n], r), splits=[1] * n)
    check(list(splits.numpy()) == [1] * n, "alltoall with splits")
    # A grouped reducescatter holding a scalar fails on every rank before anything is sent.
    _raises(tf.errors.InvalidArgumentError,
            lambda: hvd.grouped_reducescatter([tf.zeros([2, 1]), tf.constant(float(r))]),
            "grouped reducescatter of a scalar")
    s, = hvd.grouped_reducescatter([tf.ones([2 * n])], op=hvd.Sum)
    check(np.allclose(s.numpy(), n), "job usable after the refused group")
    hvd.shutdown()


def broadcast_idiom_scenario():
    """Horovod's TF2 examples: model variables, then optimizer variables, broadcast in one
    tf.function; each call's tensors keep their own names, equal on every rank."""
    import keras
    hvd.init()
    r = hvd.rank()
    keras.utils.set_random_seed(r)
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4),
                              keras.layers.Dense(2)])
    opt = keras.optimizers.Adam(0.1)
    opt.build(model.trainable_variables)
    for v in opt.variables:
        v.assign(tf.fill(v.shape, tf.cast(r + 1, v.dtype)))

    @tf.function
    def first_step():
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)

    first_step()
    mine = np.concatenate([v.numpy().ravel() for v in model.variables + opt.variables])
    everyone = hvd.allgather(tf.constant(mine[None, :]), name="idiom.values").numpy()
    check(np.all(everyone == everyone[0]), "variables differ after the broadcast")
    check(all(np.all(v.numpy() == 1) for v in opt.variables if v.dtype != tf.int64),
          "optimizer variables are rank 0's")
    hvd.shutdown()


def graph_mode_scenario():
    """tf.compat.v1 graphs: broadcast_ of reference and resource variables, broadcast_global_
    variables, objects, and the gradients of allgather and broadcast, whose graphs differ per
    rank only in values (rank 0's empty prefix and the non-root's zero are not pruned)."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    _raises(RuntimeError, lambda: hvd.broadcast_global_variables(0), "eager global variables")
    check(hvd.is_homogeneous(), "2 ranks per host is homogeneous")
    check(int(hvd.process_set_included_op().numpy()) == 1, "process_set_included_op")
    hvd.start_timeline("/dev/null")
    hvd.stop_timeline()
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ref = tf.compat.v1.Variable(tf.fill([3], float(r)), use_resource=False)
        res = tf.compat.v1.Variable(tf.fill([2], float(r)), use_resource=True)
        glob = tf.compat.v1.Variable(tf.fill([1], float(r)))
        sess.run(tf.compat.v1.global_variables_initializer())
        out_ref, = hvd.broadcast_([ref], root_rank=n - 1)
        out_res, = hvd.broadcast_([res], root_rank=n - 1)
        check(np.allclose(sess.run(out_ref), n - 1) and np.allclose(sess.run(ref), n - 1), "ref")
        check(np.allclose(sess.run(out_res), n - 1) and np.allclose(sess.run(res), n - 1), "res")
        sess.run(tf.compat.v1.assign(glob, [float(r)]))
        sess.run(hvd.broadcast_global_variables(0))
        check(np.allclose(sess.run(glob), 0.0), "broadcast_global_variables")
        obj = hvd.broadcast_object({"r": r} if r == 1 else None, root_rank=1)
        check(obj == {"r": 1}, f"broadcast_object in a graph {obj}")
        check(hvd.allgather_object(r) == list(range(n)), "allgather_object in a graph")
        if r == 0:  # a gradient only rank 0 computes: later gradient scopes differ per rank
            c = tf.ones([1])
            tf.gradients(c * c, c)
        for _ in range(2):  # the second round's names carry graph-made suffixes
            x = tf.ones([r + 1, 2]) * float(r)
            gathered = hvd.allgather(x)
            gx = tf.gradients(gathered, x, tf.ones([sum(range(1, n + 1)), 2]))[0]
            check(np.allclose(sess.run(gx), 1.0), "allgather gradient in a graph")
            b = tf.ones([3])
            gb = tf.gradients(hvd.broadcast(b, root_rank=0), b, tf.ones([3]))[0]
            check(np.allclose(sess.run(gb), 1.0 if r == 0 else 0.0), "broadcast gradient (graph)")

    @tf.function
    def grouped(x):
        return hvd.grouped_allreduce([x, x * 2.0], op=hvd.Sum)

    if r == 0:  # a trace only rank 0 makes: unnamed groups must not be numbered per process
        grouped.get_concrete_function(tf.TensorSpec([5]))
    a, b = grouped(tf.ones([2]))
    check(np.allclose(a.numpy(), n) and np.allclose(b.numpy(), 2 * n), "grouped in tf.function")

    @tf.function
    def tape_in_function(x):  # the tape hands gradient functions an op without a name
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(hvd.alltoall(x) * 2.0)
        return tape.gradient(loss, x)

    check(np.allclose(tape_in_function(tf.ones([n, 2])).numpy(), 2.0), "tape in tf.function")
    hvd.shutdown()


SCENARIOS = {"sparse": sparse_scenario, "broadcast_idiom": broadcast_idiom_scenario,
             "graph_mode": graph_mode_scenario}
