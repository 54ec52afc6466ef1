"""What the Python GPU tests share: whether this machine has a usable GPU (the CUDA driver loaded
with ctypes, as the client library does with dlopen), the skip message tools/gpu_suite.sh looks
for, and the harness of tests/integration (real daemons on loopback)."""
import ctypes
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Cluster, ctl, status_json, wait_until  # noqa: E402,F401


def gpu_count():
    """GPUs the CUDA driver sees; (0, why) without a driver or GPU."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return 0, f"dlopen(libcuda.so.1): {e}"
    rc = cuda.cuInit(0)
    if rc != 0:
        return 0, f"cuInit: CUDA error {rc}"
    count = ctypes.c_int(0)
    rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return 0, f"cuDeviceGetCount: CUDA error {rc}"
    return count.value, "the driver sees no GPU" if count.value == 0 else ""


def skip_without_gpu(test):
    """Skips the calling test with "SKIPPED (no GPU) <test>: why" unless a GPU is usable."""
    count, why = gpu_count()
    if count == 0:
        print(f"SKIPPED (no GPU) {test}: {why}", flush=True)
        pytest.skip(f"SKIPPED (no GPU) {test}: {why}")
    return count


def all_up(cluster):
    s = status_json(next(iter(cluster.daemons.values())).address)
    return s and sum(h["state"] == "UP" for h in s["hosts"]) == len(cluster.daemons)
