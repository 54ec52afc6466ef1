"""One rank of an elastic training job for elastic_test.py: the GradientTape idiom
(TensorFlowState + commit every COMMIT steps inside hvd.elastic.run) or the Keras idiom
(KerasState + the three callbacks). Each step's averaged gradient depends on the step only (each
rank adds an offset that averages to zero), so the final weights equal the reference path's
whatever ranks come and go, provided a reset rolls back to the last commit.

Environment: ELASTIC_STEPS, ELASTIC_COMMIT, ELASTIC_SLEEP_S, ELASTIC_WAIT_AT; ELASTIC_DIE_AT="<rank>:<step>,..."
(the process launched as that rank SIGKILLs itself at that step)
(by the rank the launcher gave); ELASTIC_MODE=tape|keras; ELASTIC_HOST_MESSAGE_AT (below). Prints "STEP <step> <rank> <size>", "RESUMED <unix time> <size>" at the
first collective after each reset, "DIE <unix time>" before dying, "FINAL <rank> <size> <json>"."""
import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

import allreduced.tensorflow as hvd

STEPS = int(os.environ.get("ELASTIC_STEPS", "20"))
COMMIT = int(os.environ.get("ELASTIC_COMMIT", "2"))
SLEEP_S = float(os.environ.get("ELASTIC_SLEEP_S", "0.05"))
# "<step>:<size>": at that step, commit and wait until the job has grown to that size (a joining
# rank's HostsUpdatedInterrupt ends the wait), so a slow joiner cannot miss the run.
WAIT_AT = tuple(int(x) for x in os.environ.get("ELASTIC_WAIT_AT", "0:0").split(":"))
DIE_AT = [tuple(int(x) for x in item.split(":"))
          for item in os.environ.get("ELASTIC_DIE_AT", "").split(",") if item]
# "<rank>:<step>": that rank queues a host update through Horovod's State.on_hosts_updated at
# that step, as Horovod's driver would; the next commit interrupts every rank.
HOST_MESSAGE_AT = tuple(int(x) for x in os.environ.get("ELASTIC_HOST_MESSAGE_AT", "-1:-1").split(":"))


def gradient(step):
    return np.array([np.sin(step + i) for i in range(4)], np.float64)


def reference():
    w = np.zeros(4, np.float64)
    for step in range(STEPS):
        w -= 0.1 * gradient(step)
    return w


resets = [0]
first_after_reset = [False]


def on_reset():
    resets[0] += 1
    first_after_reset[0] = True


LAUNCH_RANK = int(os.environ.get("ALLREDUCED_RANK", "-1"))


def maybe_die(step):
    if (LAUNCH_RANK, step) in DIE_AT:
        print(f"DIE {time.time()}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def averaged(step):
    mine = gradient(step) + 0.5 * (hvd.rank() - (hvd.size() - 1) / 2.0)
    out = hvd.allreduce(tf.constant(mine), op=hvd.Average, name="elastic.grad")
    if first_after_reset[0]:
        first_after_reset[0] = False
        print(f"RESUMED {time.time()} {hvd.size()}", flush=True)
    return out


def tape_idiom():
    w = tf.Variable(np.zeros(4, np.float64))
    state = hvd.elastic.TensorFlowState([w], step=0)
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            step = state.step
            if step == WAIT_AT[0] and hvd.size() < WAIT_AT[1]:
                state.commit()  # raises HostsUpdatedInterrupt once ranks wait to join
                time.sleep(SLEEP_S)
                continue
            maybe_die(step)
            if (LAUNCH_RANK, step) == HOST_MESSAGE_AT and resets[0] == 0:
                state.on_hosts_updated(time.time(), 1)
            w.assign_sub(0.1 * averaged(step))
            state.step += 1
            print(f"STEP {state.step} {hvd.rank()} {hvd.size()}", flush=True)
            if state.step % COMMIT == 0:
                state.commit()
            time.sleep(SLEEP_S)

    train(state)
    return w.numpy()


def keras_idiom():
    keras = tf.keras  # Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1, as Horovod scripts use it
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False,
                                                                     kernel_initializer="zeros")])
    optimizer = keras.optimizers.SGD(0.1)
    model.compile(optimizer=optimizer, loss="mse")
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    state.register_reset_callbacks([on_reset])

    class Step(keras.callbacks.Callback):  # the gradient step, through hvd collectives
        def on_train_batch_begin(self, batch, logs=None):
            step = state.epoch * 4 + batch
            while step == WAIT_AT[0] and hvd.size() < WAIT_AT[1]:
                state.check_host_updates()  # raises HostsUpdatedInterrupt once ranks wait to join
                time.sleep(SLEEP_S)
            maybe_die(step)
            g = averaged(step)
            kernel = model.layers[0].kernel
            kernel.assign_sub(0.1 * tf.reshape(tf.cast(g, kernel.dtype), kernel.shape))
            print(f"STEP {step + 1} {hvd.rank()} {hvd.size()}", flush=True)
            time.sleep(SLEEP_S)

    x = np.zeros((4, 4), np.float32)  # zero inputs: fit's own update is zero
    y = np.zeros((4, 1), np.float32)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, batch_size=1, epochs=STEPS // 4 - state.epoch, verbose=0,
                  callbacks=[Step(), hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.UpdateEpochStateCallback(state),
                             hvd.elastic.CommitStateCallback(state, batches_per_commit=COMMIT)])

    train(state)
    return model.layers[0].kernel.numpy().reshape(-1).astype(np.float64)


def main():
    hvd.init()
    if os.environ.get("ELASTIC_MODE", "tape") == "keras":
        global hvd_keras
        import allreduced.tensorflow.keras as hvd_keras
        hvd.elastic = hvd_keras.elastic  # the Keras names (KerasState, callbacks, run)
        final = keras_idiom()
    else:
        final = tape_idiom()
    ok = bool(np.allclose(final, reference(), atol=1e-5))
    print(f"FINAL {hvd.rank()} {hvd.size()} {json.dumps(final.tolist())} resets={resets[0]} "
          f"reference={ok}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
