"""The TensorFlow plugin's GPU kernels (issue 6): which kernels the op library registers for GPU
devices (and which of their arguments TensorFlow keeps in host memory), that the library still
needs no CUDA library, that tensors pinned to the CPU still take the CPU kernels, and, on a GPU host
with tensorflow[and-cuda], allreduce of GPU tensors across 2 processes through a real daemon."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster  # noqa: E402
from tf_ops_test import run_workers  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import kernels  # noqa: E402

# Every op with a GPU kernel in a CUDA build -> the arguments TensorFlow keeps in host memory.
# Allreduce, broadcast and reducescatter (and grouped) take device tensors (ard_submit_device); the
# others are staged through host memory and run by the CPU kernels.
GPU_KERNELS = {
    "AllreducedAllreduce": [],
    "AllreducedGroupedAllreduce": [],
    "AllreducedAllgather": ["tensor", "gathered"],
    "AllreducedBroadcast": [],
    "AllreducedAlltoall": ["tensor", "splits", "output", "received_splits"],
    "AllreducedReducescatter": [],
    "AllreducedGroupedAllgather": ["tensors", "gathered"],
    "AllreducedGroupedReducescatter": [],
    "AllreducedBarrier": [],
    "AllreducedJoin": ["last_joined_rank"],
    "AllreducedTopology": ["value"],
}
# No GPU kernel: a GPU variable's broadcast_ is a broadcast + assign in Python.
CPU_ONLY = ["AllreducedBroadcastInplace"]


def cuda_build():
    with open(os.environ["ARD_BIN_BUILD_FLAGS"]) as f:
        flags = dict(line.strip().split("=", 1) for line in f if "=" in line)
    return flags["cuda"] == "1"


def registered(op):
    return {k.device_type: sorted(k.host_memory_arg)
            for k in kernels.get_registered_kernels_for_op(op).kernel}


def test_gpu_kernels_are_registered_exactly_in_cuda_builds():
    import ctypes
    library = os.environ["ARD_BIN_TF_OPS"]
    tf.load_op_library(library)
    assert ctypes.CDLL(library).allreduced_tf_gpu_kernels() == (1 if cuda_build() else 0)
    for op, host_memory in GPU_KERNELS.items():
        kinds = registered(op)
        assert kinds.get("CPU") == [], (op, kinds)  # the CPU kernels are unchanged
        if cuda_build():
            assert kinds.get("GPU") == sorted(host_memory), (op, kinds)
        else:
            assert "GPU" not in kinds, (op, kinds)
    for op in CPU_ONLY:
        assert set(registered(op)) == {"CPU"}, op


def test_op_library_needs_no_cuda_library():
    out = subprocess.run(["readelf", "-d", os.environ["ARD_BIN_TF_OPS"]], capture_output=True,
                         text=True, check=True).stdout
    needed = {line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line}
    allowed = {"libtensorflow_framework.so.2", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1",
               "libc.so.6", "ld-linux-x86-64.so.2"}
    assert "libtensorflow_framework.so.2" in needed and needed <= allowed, needed


def run_on(hosts, per_host, scenario):
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"{scenario}-{i}") for i in range(hosts)]
        return run_workers([d.socket for d in daemons], per_host, scenario)
    finally:
        cluster.close()


def test_tensors_on_the_cpu_take_the_cpu_kernels():
    for rc, out in run_on(1, 2, "cpu_placement"):
        assert rc == 0 and "OK cpu_placement" in out, out


# The reason carries "SKIPPED (no GPU)", which tools/gpu_suite.sh treats as a failure on a GPU host.
NO_GPU = ("SKIPPED (no GPU): no GPU visible to TensorFlow (needs a GPU host, and the venv with "
          "tensorflow[and-cuda]==2.21.0 instead of tensorflow-cpu)")


# 1x2: two processes through one daemon; 2x1: two daemons (simulated hosts) on this machine, one
# process each, so the job crosses daemons (hierarchical when both processes share a GPU).
@pytest.mark.skipif(not tf.config.list_physical_devices("GPU"), reason=NO_GPU)
@pytest.mark.parametrize("hosts,per_host", [(1, 2), (2, 1)], ids=["1x2", "2x1"])
def test_allreduce_of_gpu_tensors_across_two_processes(hosts, per_host):
    assert cuda_build(), "the op library was built without CUDA: no GPU kernels"
    for rc, out in run_on(hosts, per_host, "gpu"):
        assert rc == 0 and "OK gpu" in out, out
