"""allreduced.tensorflow.keras with both Keras flavours, 4 real processes over two daemons: the
newer names (PartialDistributedOptimizer, BestModelCheckpoint, alltoall, join,
broadcast_global_variables) with Keras 3 and with tf_keras; with tf_keras (TF_USE_LEGACY_KERAS=1,
its new and legacy optimizers), the training equivalence and the save/load/callbacks scenarios
that tf_ops_test.py runs with Keras 3, and broadcast_global_variables in graph mode."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tf_ops_test import run_on_two_hosts  # noqa: E402

LEGACY = {"TF_USE_LEGACY_KERAS": "1"}


def run_ok(scenario, env):
    for rc, out in run_on_two_hosts(scenario, env):
        assert rc == 0 and f"OK {scenario}" in out, out


@pytest.mark.parametrize("flavour", [{}, LEGACY], ids=["keras3", "tf_keras"])
def test_partial_optimizer_best_checkpoint_alltoall_join(flavour, tmp_path):
    run_ok("keras_api", dict(flavour, ALLREDUCED_TEST_DIR=str(tmp_path)))


def test_tf_keras_distributed_optimizer_matches_single_process_training():
    run_ok("equivalence", LEGACY)


def test_tf_keras_fit_with_warmup_then_save_and_load_the_wrapped_optimizer(tmp_path):
    run_ok("save_load", dict(LEGACY, ALLREDUCED_TEST_DIR=str(tmp_path)))


def test_tf_keras_broadcast_global_variables_in_graph_mode():
    run_ok("legacy_graph", LEGACY)
