"""allreduced.tensorflow.keras with both Keras flavours, real processes over two daemons: the
newer names (PartialDistributedOptimizer, BestModelCheckpoint, alltoall, join,
broadcast_global_variables) and SyncBatchNormalization with Keras 3 and with tf_keras; with
tf_keras (TF_USE_LEGACY_KERAS=1, its new and legacy optimizers), the training equivalence and
the save/load/callbacks scenarios that tf_ops_test.py runs with Keras 3, and
broadcast_global_variables in graph mode. Four ranks (2 per daemon), except the equivalence: one
per daemon, since tf_keras traces each of its cases' training step afresh, which takes four
processes on a small machine past the workers' limit."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster  # noqa: E402
from tf_ops_test import run_workers  # noqa: E402

LEGACY = {"TF_USE_LEGACY_KERAS": "1"}


def run_ok(scenario, env, per_host=2):
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"{scenario}-{i}") for i in range(2)]
        for rc, out in run_workers([d.socket for d in daemons], per_host, scenario, env):
            assert rc == 0 and f"OK {scenario}" in out, out
    finally:
        cluster.close()


@pytest.mark.parametrize("flavour", [{}, LEGACY], ids=["keras3", "tf_keras"])
def test_partial_optimizer_best_checkpoint_alltoall_join(flavour, tmp_path):
    run_ok("keras_api", dict(flavour, ALLREDUCED_TEST_DIR=str(tmp_path)))


@pytest.mark.parametrize("flavour", [{}, LEGACY], ids=["keras3", "tf_keras"])
def test_sync_batch_norm_matches_batch_norm_on_the_global_batch(flavour):
    run_ok("sync_bn", flavour)


def test_tf_keras_distributed_optimizer_matches_single_process_training():
    run_ok("equivalence", LEGACY, per_host=1)


def test_tf_keras_gradient_aggregation_as_horovod_s_tests_use_it():
    run_ok("aggregation", LEGACY, per_host=1)


def test_tf_keras_fit_with_warmup_then_save_and_load_the_wrapped_optimizer(tmp_path):
    run_ok("save_load", dict(LEGACY, ALLREDUCED_TEST_DIR=str(tmp_path)))


def test_tf_keras_broadcast_global_variables_in_graph_mode():
    run_ok("legacy_graph", LEGACY)
