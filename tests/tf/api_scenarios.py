"""Worker scenarios for the rest of Horovod's TensorFlow surface: grouped allgather/reducescatter,
gradients of every collective, IndexedSlices, Python objects, in-place broadcast, process sets,
Adasum's error. Run through tf_worker.py."""
import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd
from tf_worker import check


def grouped_and_objects_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # grouped_allgather: variable first dimensions, two dtypes, one atomic group.
    a, b = hvd.grouped_allgather([tf.fill([r + 1, 2], float(r)), tf.fill([1], r)])
    check(list(a.numpy()[:, 0]) == [s for s in range(n) for _ in range(s + 1)],
          f"grouped_allgather {a.numpy()}")
    check(list(b.numpy()) == list(range(n)), "grouped_allgather second tensor")
    # grouped_reducescatter: Sum of ones; Average of the rank.
    rows = 2 * n
    s1, s2 = hvd.grouped_reducescatter([tf.ones([rows, 2]), tf.fill([rows], float(r))],
                                       op=hvd.Sum)
    check(s1.shape == (2, 2) and np.allclose(s1.numpy(), n), f"grouped_reducescatter {s1}")
    check(np.allclose(s2.numpy(), sum(range(n))), "grouped_reducescatter second tensor")
    # Python objects.
    obj = hvd.broadcast_object({"rank": r, "payload": list(range(r + 3))}, root_rank=n - 1)
    check(obj == {"rank": n - 1, "payload": list(range(n + 2))}, f"broadcast_object {obj}")
    fn = hvd.broadcast_object_fn(root_rank=0)
    check(fn(("hello", r)) == ("hello", 0), "broadcast_object_fn")
    gathered = hvd.allgather_object({"r": r, "s": "x" * r})
    check(gathered == [{"r": i, "s": "x" * i} for i in range(n)], f"allgather_object {gathered}")
    # In-place broadcast of a variable.
    v = tf.Variable(tf.fill([3], float(r)))
    hvd.broadcast_(v, root_rank=1)
    check(np.allclose(v.numpy(), 1.0), "broadcast_")
    # IndexedSlices: two allgathers; Average divides the values by the size.
    sl = tf.IndexedSlices(tf.fill([1, 2], float(r + 1)), tf.constant([r]),
                          dense_shape=tf.constant([n, 2]))
    red = hvd.allreduce(sl, op=hvd.Average)
    check(isinstance(red, tf.IndexedSlices), "IndexedSlices stays sparse")
    check(list(red.indices.numpy()) == list(range(n)), "IndexedSlices indices")
    check(np.allclose(red.values.numpy()[:, 0], [(i + 1) / n for i in range(n)]),
          f"IndexedSlices values {red.values.numpy()}")
    hvd.shutdown()


def gradients_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    rows = 2 * n + 1
    x = tf.Variable(tf.fill([rows, 2], float(r + 1)))
    # reducescatter (Average, postscale 2): Horovod's gradient is the allgathered output gradient
    # times the scales (times the size for Sum only); the loss weights rank k's block by k + 1.
    with tf.GradientTape() as tape:
        out = hvd.reducescatter(x, op=hvd.Average, postscale_factor=2.0, name="rs.grad")
        loss = tf.reduce_sum(out * float(r + 1))
    g = tape.gradient(loss, x).numpy()
    block = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    expected = np.concatenate([np.full([block[k], 2], (k + 1) * 2.0) for k in range(n)])
    check(np.allclose(g, expected), f"reducescatter gradient {g[:, 0]} vs {expected[:, 0]}")
    # alltoall: rank r sends (d + 1) rows to rank d; the gradient of row j is what the receiver
    # weighted it by (receiver rank + 1).
    splits = [d + 1 for d in range(n)]
    y = tf.Variable(tf.ones([sum(splits), 1]))
    with tf.GradientTape() as tape:
        recv, _ = hvd.alltoall(y, splits=splits, name="a2a.grad")
        loss = tf.reduce_sum(recv * float(r + 1))
    g = tape.gradient(loss, y).numpy()[:, 0]
    expected = [d + 1.0 for d in range(n) for _ in range(d + 1)]
    check(np.allclose(g, expected), f"alltoall gradient {g} vs {expected}")
    # grouped allreduce and grouped allgather gradients.
    z = tf.Variable(tf.fill([2], float(r)))
    w = tf.Variable(tf.fill([r + 1], 1.0))
    with tf.GradientTape() as tape:
        s, = hvd.grouped_allreduce([z], op=hvd.Sum)
        gathered, = hvd.grouped_allgather([w])
        loss = tf.reduce_sum(s) * float(r + 1) + tf.reduce_sum(gathered)
    gz, gw = tape.gradient(loss, [z, w])
    check(np.allclose(gz.numpy(), sum(range(1, n + 1))), f"grouped allreduce grad {gz}")
    check(np.allclose(gw.numpy(), 1.0), f"grouped allgather grad (averaged) {gw}")
    hvd.shutdown()


def process_sets_scenario():
    """Needs 4 ranks on 2 hosts (ranks 0,1 on the first): sets spanning hosts and within one."""
    evens = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[evens])
    r, n = hvd.rank(), hvd.size()
    check(n == 4, "process_sets scenario needs 4 ranks")
    first_host = hvd.add_process_set([0, 1])
    check(evens.included() == (r in (0, 2)) and first_host.included() == (r < 2), "included")
    if evens.included():
        check(evens.size() == 2 and evens.rank() == r // 2, "set rank/size")
        s = hvd.allreduce(tf.constant([float(r)]), op=hvd.Average, process_set=evens)
        check(np.allclose(s.numpy(), 1.0), f"allreduce in set {s.numpy()}")
        g = hvd.allgather(tf.constant([r]), process_set=evens)
        check(list(g.numpy()) == [0, 2], f"allgather in set {g.numpy()}")
        # root_rank is a global rank, as in Horovod: 2 is the set's second member.
        b = hvd.broadcast(tf.constant([r]), root_rank=2, process_set=evens)
        check(list(b.numpy()) == [2], f"broadcast from global rank 2 in a set {b.numpy()}")
        v = tf.Variable([r, r])
        hvd.broadcast_variables([v], root_rank=2, process_set=evens)
        check(list(v.numpy()) == [2, 2], f"broadcast_variables in a set {v.numpy()}")
        o = hvd.broadcast_object({"from": r}, root_rank=2, process_set=evens)
        check(o == {"from": 2}, f"broadcast_object in a set {o}")
        try:
            hvd.broadcast(tf.constant([r]), root_rank=1, process_set=evens)
            check(False, "a root outside the set was accepted")
        except ValueError as e:
            check("root_rank 1 is not a member" in str(e), str(e))
        a, = hvd.grouped_allreduce([tf.constant([1])], op=hvd.Sum, process_set=evens)
        check(list(a.numpy()) == [2], "grouped allreduce in set")
    else:
        try:
            hvd.allreduce(tf.constant([1.0]), process_set=evens)
            check(False, "a non-member used a process set")
        except ValueError as e:
            check("not a member" in str(e), str(e))
        # Outside the set, as in Horovod: gradients stay local, objects stay as given.
        w = tf.Variable([float(r)])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        grad, = hvd.DistributedGradientTape(tape, process_set=evens).gradient(loss, [w])
        check(list(grad.numpy()) == [2.0 * r], f"a non-member's gradient {grad.numpy()}")
        check(hvd.broadcast_object({"mine": r}, root_rank=0, process_set=evens) == {"mine": r},
              "broadcast_object outside the set")
    check(int(hvd.size_op(process_set_id=evens.process_set_id).numpy()) == 2,
          "size_op of a process set, on members and others")
    if first_host.included():
        s = hvd.allreduce(tf.constant([float(r + 1)]), op=hvd.Sum, process_set=first_host)
        check(np.allclose(s.numpy(), 3.0), f"allreduce in a one-host set {s.numpy()}")
    # The global set still works and sees everyone.
    s = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="global.after.sets")
    check(np.allclose(s.numpy(), n), "global allreduce after sets")
    check(hvd.remove_process_set(evens) and not hvd.remove_process_set(evens), "remove")
    hvd.barrier()
    hvd.shutdown()


SCENARIOS = {"grouped_objects": grouped_and_objects_scenario, "gradients": gradients_scenario,
             "process_sets": process_sets_scenario}


def semantics_scenario():
    """Every reduce op on every reducible dtype, broadcast from each root, many tensors fused in
    one tf.function step, and the error cases with their exception types."""
    import allreduced.tensorflow as hvd_api  # the public module, as a script would use it
    try:
        hvd_api.allreduce(tf.ones([1]))
        check(False, "allreduce before init did not raise")
    except (tf.errors.FailedPreconditionError, ValueError) as e:
        check("init" in str(e), f"before init: {e}")
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    values = [float(k + 1) for k in range(n)]
    expect = {hvd.Sum: sum(values), hvd.Average: sum(values) / n, hvd.Min: min(values),
              hvd.Max: max(values), hvd.Product: float(np.prod(values))}
    dtypes = [tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
              tf.float64]
    for dtype in dtypes:
        for op, want in expect.items():
            if op == hvd.Average and dtype.is_integer:
                want = float(int(sum(values)) // n)  # integer average truncates
            out = hvd.allreduce(tf.cast(tf.fill([3, 2], values[r]), dtype), op=op,
                                name=f"sweep.{dtype.name}.{op}")
            check(out.dtype == dtype and out.shape == (3, 2), f"{dtype.name} op {op} shape")
            got = tf.cast(out, tf.float64).numpy()
            check(np.allclose(got, want, rtol=1e-2), f"{dtype.name} op {op}: {got[0, 0]} vs {want}")
    for root in range(n):
        b = hvd.broadcast(tf.constant([r, 10 * r], tf.int64), root_rank=root, name=f"root.{root}")
        check(list(b.numpy()) == [root, 10 * root], f"broadcast from {root}")
    for dtype in (tf.bool, tf.int16, tf.uint16):
        g = hvd.allgather(tf.cast(tf.fill([1], r % 2), dtype), name=f"gather.{dtype.name}")
        check(list(tf.cast(g, tf.int32).numpy()) == [k % 2 for k in range(n)], dtype.name)

    # 64 tensors in one compiled step: submitted together, fused by the daemon.
    tensors = [tf.fill([k + 1], float(r + k)) for k in range(64)]

    @tf.function
    def many(ts):
        return [hvd.allreduce(t, op=hvd.Sum, name=f"many.{k}") for k, t in enumerate(ts)]

    for k, out in enumerate(many(tensors)):
        check(np.allclose(out.numpy(), sum(q + k for q in range(n))), f"fused tensor {k}")
    # Errors: mismatched dtype, mismatched op, bad root, unsupported dtype.
    cases = [
        (lambda: hvd.allreduce(tf.ones([2], tf.float32 if r == 0 else tf.float64), name="dt"),
         tf.errors.FailedPreconditionError, "Mismatched data types"),
        (lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum if r == 0 else hvd.Max, name="op"),
         tf.errors.FailedPreconditionError, "Mismatched"),
        (lambda: hvd.broadcast(tf.ones([2]), root_rank=n, name="root"),
         tf.errors.OpError, "root"),
        (lambda: hvd.allreduce(tf.constant(["a"])), tf.errors.InvalidArgumentError,
         "not in the list of allowed values"),
    ]
    for fn, exc, text in cases:
        try:
            fn()
            check(False, f"no error for the {exc.__name__} case")
        except exc as e:
            check(text in str(e), f"{exc.__name__}: {e}")
    # The job is still usable after rejected collectives.
    s = hvd.allreduce(tf.ones([1]), op=hvd.Sum, name="after.errors")
    check(np.allclose(s.numpy(), n), "allreduce after errors")
    hvd.shutdown()


SCENARIOS["semantics"] = semantics_scenario
