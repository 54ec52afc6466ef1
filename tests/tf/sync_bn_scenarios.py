"""Worker scenario for SyncBatchNormalization with the Keras that `tf.keras` names (Keras 3, or
tf_keras under TF_USE_LEGACY_KERAS=1): it is that Keras's BatchNormalization, takes Horovod's
`fused=False`, and in training normalizes with the statistics of every rank's rows together, as a
plain BatchNormalization on the concatenated global batch does (outputs and moving statistics),
also with a mask; with tf_keras also in graph mode, evaluated in a tf.compat.v1 Session. Run
through tf_worker.py."""
import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd
from tf_worker import check


def _rows(k):
    """Rank k's 3 rows of 2 channels, different on every rank."""
    return np.array([[k, k + 1], [2 * k + 1, -k], [3 * k, 0.5 * k]], np.float32)


def _against_plain(keras, r, n):
    """SyncBatchNormalization on this rank's rows == BatchNormalization on all ranks' rows."""
    everyone = np.concatenate([_rows(k) for k in range(n)])
    plain = keras.layers.BatchNormalization(momentum=0.5)
    sync = hvd.SyncBatchNormalization(momentum=0.5, fused=False)
    want = plain(tf.constant(everyone), training=True).numpy()[3 * r:3 * r + 3]
    got = sync(tf.constant(_rows(r)), training=True).numpy()
    check(np.allclose(got, want, atol=1e-5), f"output {got} != {want}")
    for stat in ("moving_mean", "moving_variance"):
        mine, theirs = getattr(sync, stat).numpy(), getattr(plain, stat).numpy()
        check(np.allclose(mine, theirs, atol=1e-5), f"{stat} {mine} != {theirs}")


def _masked(r, n):
    """[1, 3, 2] sequences whose last step is masked: only unmasked steps of all ranks count."""
    sync = hvd.SyncBatchNormalization(momentum=0.0, epsilon=1e-3)
    mask = tf.constant([[True, True, False]])
    got = sync(tf.constant(_rows(r)[None]), training=True, mask=mask).numpy()[0]
    seen = np.concatenate([_rows(k)[:2] for k in range(n)])
    want = (_rows(r) - seen.mean(axis=0)) / np.sqrt(seen.var(axis=0) + 1e-3)
    check(np.allclose(got[:2], want[:2], atol=1e-4), f"masked output {got} != {want}")
    check(np.allclose(sync.moving_mean.numpy(), seen.mean(axis=0), atol=1e-5), "masked mean")


def _graph_mode(keras, r, n):
    """tf_keras in a tf.compat.v1 graph: built, initialized and evaluated in a Session (the
    moving statistics move when the layer's `updates` run, as for any tf_keras layer there)."""
    everyone = np.concatenate([_rows(k) for k in range(n)])
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        sync = hvd.SyncBatchNormalization(momentum=0.0, name="graph_bn")
        out = sync(tf.constant(_rows(r)), training=True)
        sess.run(tf.compat.v1.global_variables_initializer())
        got, _ = sess.run([out, sync.updates])
        mean, var = sess.run([sync.moving_mean, sync.moving_variance])
    check(np.allclose(mean, everyone.mean(axis=0), atol=1e-5), f"graph moving mean {mean}")
    check(np.allclose(var, everyone.var(axis=0), atol=1e-4), f"graph moving variance {var}")
    want = (_rows(r) - everyone.mean(axis=0)) / np.sqrt(everyone.var(axis=0) + sync.epsilon)
    check(np.allclose(got, want, atol=1e-4), f"graph output {got} != {want}")


def sync_bn_scenario():
    keras = tf.keras
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    check(issubclass(hvd.SyncBatchNormalization, keras.layers.BatchNormalization),
          f"not a {keras.layers.BatchNormalization}")
    try:
        hvd.SyncBatchNormalization(fused=True)
        check(False, "fused=True accepted")
    except ValueError:
        pass
    _against_plain(keras, r, n)
    _masked(r, n)
    if keras.__name__.startswith("tf_keras"):
        _graph_mode(keras, r, n)
    hvd.shutdown()


SCENARIOS = {"sync_bn": sync_bn_scenario}
