"""The TensorFlow plugin on 2 and 4 real processes over one and two daemons: topology, allreduce
(Sum, Average, Max), allgather with different first dimensions, broadcast, broadcast_variables,
an allreduce inside tf.function, its gradient, and a mismatch surfacing as FailedPreconditionError
with Horovod's message."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "..", "..", "tfplugin", "python")


def run_workers(sockets, per_host, scenario):
    size = len(sockets) * per_host
    env_base = dict(os.environ, ALLREDUCED_JOB=f"tf-{scenario}-{size}",
                    PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
                    ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"])
    procs = []
    for sock in sockets:
        for local in range(per_host):
            env = dict(env_base, ALLREDUCED_SOCKET=sock, ALLREDUCED_SIZE=str(size),
                       ALLREDUCED_LOCAL_SIZE=str(per_host), ALLREDUCED_LOCAL_RANK=str(local))
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "tf_worker.py"),
                                           scenario], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0] + "\nKILLED: timed out"
        outputs.append((p.returncode, out))
    return outputs


@pytest.mark.parametrize("hosts,per_host", [(1, 2), (2, 2)], ids=["1x2", "2x2"])
def test_ops(hosts, per_host):
    cluster = Cluster()
    try:
        daemons = [cluster.add(f"tf-{i}") for i in range(hosts)]
        for rc, out in run_workers([d.socket for d in daemons], per_host, "ops"):
            assert rc == 0 and f"OK ops" in out, out
    finally:
        cluster.close()


def test_distributed_gradient_tape_matches_single_process_training():
    cluster = Cluster()
    try:
        daemons = [cluster.add(f"tape-{i}") for i in range(2)]
        for rc, out in run_workers([d.socket for d in daemons], 2, "tape"):
            assert rc == 0 and "OK tape" in out, out
    finally:
        cluster.close()


def test_keras_fit_with_distributed_optimizer_and_callbacks():
    cluster = Cluster()
    try:
        daemons = [cluster.add(f"fit-{i}") for i in range(2)]
        for rc, out in run_workers([d.socket for d in daemons], 2, "fit"):
            assert rc == 0 and "OK fit" in out, out
    finally:
        cluster.close()
