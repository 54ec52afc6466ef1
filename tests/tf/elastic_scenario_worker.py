"""One worker of Horovod's elastic TensorFlow 2 scenarios (as Horovod's documentation and its
integration tests state them), run by elastic_scenarios_test.py through our launcher.

It trains a small Keras model with DistributedGradientTape inside hvd.elastic.run on a
TensorFlowKerasState (epoch, batch, rendezvous: how many times the training function started in
this job). After each epoch rank 0 appends a JSON line to --logfile: epoch, rank, size,
start_rank (the HOROVOD_RANK the launcher started it with), hostname (HOROVOD_HOSTNAME) and
rendezvous. The test's discovery script reads that file's line count as "the epoch", so hosts
change between epochs; when --discovery-schedule says the hosts change after this epoch, rank 0
waits (at most --discovery-wait s) until the launcher's notice reached State._host_messages, as
Horovod's own test script does (and after the --wait-after-epochs too).
--exit-schedule {"(epoch, batch)": [start ranks]} makes those workers fail there, by exception
or by SIGKILL (--exit-mode). --slow-rejoin START_RANK:SECONDS makes that worker re-initialise that
much later after a failure (a survivor whose framework is slow to come back on a loaded host).
"""
import argparse
import json
import os
import signal
import time

import tensorflow as tf

import allreduced.tensorflow as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--logfile", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches-per-epoch", type=int, default=4)
parser.add_argument("--epoch-wait", type=float, default=0.0)
parser.add_argument("--discovery-schedule", default="[]")
parser.add_argument("--discovery-wait", type=float, default=120.0)
parser.add_argument("--exit-schedule", default="{}")
parser.add_argument("--wait-after-epochs", default="[]",
                    help="epochs after which rank 0 waits for a host update anyway")
parser.add_argument("--exit-mode", default="exception", choices=["exception", "kill"])
parser.add_argument("--slow-rejoin", default="")
args = parser.parse_args()

hvd.init()
if args.slow_rejoin and args.slow_rejoin.split(":")[0] == os.environ["HOROVOD_RANK"]:
    import allreduced.tensorflow.basics as _basics  # what hvd.elastic.run re-initialises with

    def _slow_init(init=_basics.init, delay=float(args.slow_rejoin.split(":")[1])):
        time.sleep(delay)
        init()
    _basics.init = _slow_init

START_RANK = int(os.environ["HOROVOD_RANK"])
HOSTNAME = os.environ["HOROVOD_HOSTNAME"]
schedule = json.loads(args.discovery_schedule)
hosts_at = {epoch: hosts for epoch, hosts in schedule if epoch is not None}
default_hosts = schedule[-1][1] if schedule else []
exits = json.loads(args.exit_schedule)
wait_after = json.loads(args.wait_after_epochs)

features = tf.random.stateless_uniform([16, 2], seed=[1, 2])
labels = tf.one_hot(tf.cast(features[:, 0] > 0.5, tf.int32), 2)
model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(2, activation="softmax")])
optimizer = tf.keras.optimizers.SGD(0.01)


def step(distributed=True):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.keras.losses.categorical_crossentropy(labels, model(features)))
    if distributed:
        tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


def maybe_exit(epoch, batch):
    if START_RANK in exits.get(str((epoch, batch)), []):
        print(f"EXIT start_rank={START_RANK} epoch={epoch} batch={batch}", flush=True)
        if args.exit_mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"scheduled failure of start rank {START_RANK}")


def log_epoch(state):
    line = {"epoch": state.epoch, "rank": hvd.rank(), "size": hvd.size(),
            "start_rank": START_RANK, "hostname": HOSTNAME, "rendezvous": state.rendezvous}
    with open(args.logfile, "a") as f:
        f.write(json.dumps(line) + "\n")


def wait_for_hosts_message(state):
    deadline = time.monotonic() + args.discovery_wait
    while state._host_messages.empty():
        if time.monotonic() > deadline:
            raise TimeoutError("no host update from the launcher")
        time.sleep(0.1)


@hvd.elastic.run
def train(state):
    state.rendezvous += 1
    while state.epoch < args.epochs:
        while state.batch < args.batches_per_epoch:
            maybe_exit(state.epoch, state.batch)
            step()
            state.batch += 1
            state.commit()
        if hvd.rank() == 0:
            log_epoch(state)
            now = hosts_at.get(state.epoch, default_hosts)
            if (now != hosts_at.get(state.epoch + 1, default_hosts)
                    or state.epoch in wait_after):
                wait_for_hosts_message(state)
        time.sleep(args.epoch_wait)
        state.epoch += 1
        state.batch = 0
        state.commit()


step(distributed=False)  # builds the optimizer's variables (no collective: newcomers do it too)
state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0, rendezvous=0)
train(state)
print(f"DONE start_rank={START_RANK} rank={hvd.rank()} size={hvd.size()}", flush=True)
