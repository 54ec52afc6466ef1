"""Worker scenarios for the GPU kernels (issue 6). Run through tf_worker.py.

"cpu_placement": tensors pinned to the CPU still go through the CPU kernels (host path) with the
same results, whether or not the library has GPU kernels and the host has a GPU.
"gpu": every process uses one GPU (local_rank % GPUs, made TensorFlow's only visible GPU, so on a
multi-GPU host TensorFlow's GPU:0 is CUDA device 1 for local rank 1); allreduce, broadcast and
reducescatter of device tensors (real GPU kernels, ard_submit_device on TensorFlow's stream) and
the HostMemory ops, values checked on every rank. Needs a GPU host with tensorflow[and-cuda].
"""
import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd
from tf_worker import check


def _on(tensor, kind):
    return tf.DeviceSpec.from_string(tensor.device).device_type == kind


def cpu_placement_scenario():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    total = sum(range(1, n + 1))
    with tf.device("/CPU:0"):
        x = tf.constant([1.0, 2.0, 3.0]) * (r + 1)
        s = hvd.allreduce(x, op=hvd.Sum, name="cpu-sum")
        a, b = hvd.grouped_allreduce([x, tf.fill([2], r)], op=hvd.Sum, name="cpu-grouped")
        v = tf.Variable([float(r)] * 3)
        hvd.broadcast_variables([v], root_rank=n - 1)

        @tf.function
        def step(t):
            return hvd.allreduce(t, op=hvd.Max, name="cpu-max")

        m = step(tf.fill([4], r))
    check(_on(s, "CPU") and _on(a, "CPU") and _on(m, "CPU"), f"placed on {s.device}, {m.device}")
    check(np.allclose(s.numpy(), np.array([1.0, 2.0, 3.0]) * total), f"sum {s.numpy()}")
    check(np.allclose(a.numpy(), s.numpy()) and list(b.numpy()) == [sum(range(n))] * 2, "grouped")
    check(np.allclose(v.numpy(), n - 1), f"broadcast_variables {v.numpy()}")
    check(list(m.numpy()) == [n - 1] * 4, f"max in tf.function {m.numpy()}")
    if not tf.config.list_physical_devices("GPU"):
        # Default placement on a host without a GPU: the CPU kernels, as before issue 6.
        d = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="default-placement")
        check(_on(d, "CPU") and np.allclose(d.numpy(), n), "default placement")
    hvd.shutdown()


def _use_one_gpu():
    gpus = tf.config.list_physical_devices("GPU")
    check(len(gpus) > 0, "no GPU visible to TensorFlow (is tensorflow[and-cuda] installed?)")
    mine = gpus[hvd.local_rank() % len(gpus)]
    tf.config.set_visible_devices([mine], "GPU")
    tf.config.experimental.set_memory_growth(mine, True)  # several processes may share it


def gpu_scenario():
    hvd.init()
    _use_one_gpu()
    r, n = hvd.rank(), hvd.size()
    total = sum(range(1, n + 1))
    with tf.device("/GPU:0"):
        # Allreduce through the device path: Sum, Average, Max; several dtypes; output on the GPU.
        for dtype in (tf.float32, tf.float16, tf.bfloat16, tf.float64, tf.int32, tf.int64):
            x = tf.cast(tf.range(1, 6), dtype) * (r + 1)
            s = hvd.allreduce(x, op=hvd.Sum, name=f"sum-{dtype.name}")
            check(_on(s, "GPU") and s.dtype == dtype, f"{dtype.name}: {s.device} {s.dtype}")
            want = np.arange(1, 6) * total
            check(np.allclose(tf.cast(s, tf.float64).numpy(), want), f"{dtype.name} {s.numpy()}")
        avg = hvd.allreduce(tf.fill([3], float(r)), name="avg")
        check(np.allclose(avg.numpy(), sum(range(n)) / n), f"average {avg.numpy()}")
        mx = hvd.allreduce(tf.fill([3], r), op=hvd.Max, name="max")
        check(list(mx.numpy()) == [n - 1] * 3, f"max {mx.numpy()}")
        # A larger tensor (4 MiB), several steps reusing the staging arena.
        big = tf.fill([1 << 20], float(r + 1))
        for step in range(3):
            out = hvd.allreduce(big, op=hvd.Sum, name="big")
            check(np.allclose(out.numpy(), total), f"big step {step}")
        # Grouped allreduce of mixed dtypes, with an empty tensor in the group.
        a, b, e = hvd.grouped_allreduce([tf.fill([4], float(r)), tf.fill([2], r), tf.zeros([0])],
                                        op=hvd.Sum, name="grouped")
        check(_on(a, "GPU") and np.allclose(a.numpy(), sum(range(n))), f"grouped {a.numpy()}")
        check(list(b.numpy()) == [sum(range(n))] * 2 and e.shape == (0,), "grouped int/empty")

        # Inside tf.function, with its gradient (an allreduce too).
        @tf.function
        def step_fn(t):
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = tf.reduce_sum(hvd.allreduce(t * t, op=hvd.Sum, name="fn"))
            return y, tape.gradient(y, t)

        w = tf.constant([2.0, 3.0])
        y, dw = step_fn(w)
        check(np.isclose(y.numpy(), 13.0 * n) and np.allclose(dw.numpy(), [4.0 * n, 6.0 * n]),
              f"tf.function/gradient {y.numpy()} {dw.numpy()}")
        # Broadcast and reducescatter through the device path (results stay on the GPU).
        for root in range(n):
            bc = hvd.broadcast(tf.fill([3], float(r)), root_rank=root, name=f"bcast-{root}")
            check(_on(bc, "GPU") and list(bc.numpy()) == [root] * 3, f"broadcast {bc.numpy()}")
        bb = hvd.broadcast(tf.fill([2], r == n - 1), root_rank=n - 1, name="bcast-bool")
        check(list(bb.numpy()) == [True, True], f"broadcast bool {bb.numpy()}")
        rs = hvd.reducescatter(tf.ones([2 * n, 3]), op=hvd.Sum, name="rs")
        check(_on(rs, "GPU") and rs.shape == (2, 3) and np.allclose(rs.numpy(), n),
              f"reducescatter {rs.numpy()}")
        # 2n+1 rows: rank 0's block has one row more; rows hold their index, so blocks are known.
        rows = tf.tile(tf.range(2 * n + 1, dtype=tf.float32)[:, None], [1, 2]) * (r + 1)
        uneven = hvd.reducescatter(rows, op=hvd.Sum, name="rs-uneven")
        first = 2 * r + min(r, 1)
        want = np.arange(first, first + (3 if r == 0 else 2))[:, None] * total * np.ones([1, 2])
        check(uneven.shape == want.shape and np.allclose(uneven.numpy(), want),
              f"uneven reducescatter {uneven.numpy()}")
        ga, gb = hvd.grouped_reducescatter([tf.ones([n, 2]), tf.fill([n], float(r))], op=hvd.Sum,
                                           name="grs")
        check(np.allclose(ga.numpy(), n) and np.allclose(gb.numpy(), sum(range(n))),
              f"grouped_reducescatter {ga.numpy()} {gb.numpy()}")
        # Ops staged through host memory (HostMemory GPU registrations).
        g = hvd.allgather(tf.fill([r + 1, 2], float(r)), name="gather")
        check(list(g.numpy()[:, 0]) == [s for s in range(n) for _ in range(s + 1)], "allgather")
        out, received = hvd.alltoall(tf.fill([n, 2], r), name="a2a")
        check(list(out.numpy()[:, 0]) == list(range(n)), f"alltoall {out.numpy()}")
        # broadcast_variables of GPU variables (broadcast + assign).
        v = tf.Variable(tf.fill([5], float(r)))
        check(_on(v, "GPU"), f"variable on {v.device}")
        hvd.broadcast_variables([v], root_rank=0)
        check(np.allclose(v.numpy(), 0.0), f"broadcast_variables {v.numpy()}")
    check(hvd.cuda_built() and hvd.nccl_built(), "cuda_built/nccl_built")
    hvd.shutdown()


SCENARIOS = {"cpu_placement": cpu_placement_scenario, "gpu": gpu_scenario}
