"""`allreducectl bench --device gpu` against a real daemon. Everywhere (CI included): without a CUDA
driver and GPU it fails at once with one "no CUDA driver/device" line and exit status 1, before
any worker starts, and the default stays --device cpu. On a GPU host: the GPU bench with --check
(every element of the warm-up and last results, each worker on its own stream) and the NCCL peer
measured in the same run, with ratios. No timing assertions beyond "fails fast"."""
import json
import time

import pytest

from gpu_host import Cluster, ctl, gpu_count, skip_without_gpu


@pytest.fixture(scope="module")
def daemon():
    cluster = Cluster()
    try:
        yield cluster.add("gpu-bench")
    finally:
        cluster.close()


def test_device_gpu_without_a_gpu_fails_fast(daemon):
    if gpu_count()[0] > 0:
        pytest.skip("a GPU is present: test_device_gpu_rows covers --device gpu")
    start = time.monotonic()
    r = ctl("bench", "--sockets", daemon.socket, "--device", "gpu", "--np", "2", "--sizes",
            "4K:1M", "--check", timeout_s=30)
    assert time.monotonic() - start < 10
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(
        "allreducectl: bench: FAILED_PRECONDITION: no CUDA driver/device: "), lines[0]
    # The table header is printed as the workers start: none did.
    assert r.stdout == ""
    # The NCCL peer's process reports the same in the workers' line protocol.
    r = ctl("bench-nccl", "--sockets", daemon.socket, "--peer_gpus", "1", "--sizes", "4K",
            timeout_s=30)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.startswith("ERROR FAILED_PRECONDITION: no CUDA driver/device: "), r.stdout


def test_default_device_is_cpu(daemon):
    r = ctl("bench", "--sockets", daemon.socket, "--np", "2", "--sizes", "4K", "--check",
            "--json", timeout_s=60)
    assert r.returncode == 0, (r.stderr, daemon.read_log())
    report = json.loads(r.stdout)
    assert "device" not in report and "peer" not in report
    assert [row["wrong"] for row in report["rows"]] == [0]


def test_gpu_only_allreduce_is_a_usage_error(daemon):
    r = ctl("bench", "--sockets", daemon.socket, "--device", "gpu", "--op", "allgather")
    assert r.returncode == 2
    assert "--device gpu serves allreduce only" in r.stderr


def test_device_gpu_rows(daemon):
    gpus = skip_without_gpu("bench_device_test.test_device_gpu_rows")
    r = ctl("bench", "--sockets", daemon.socket, "--device", "gpu", "--np", "2", "--sizes",
            "4:64M", "--iters", "10", "--check", "--json", "--peer", "nccl", timeout_s=600)
    assert r.returncode == 0, (r.stderr, daemon.read_log())
    report = json.loads(r.stdout)
    assert report["device"] == "gpu" and report["ranks"] == 2
    assert [row["size"] for row in report["rows"]] == [4 << i for i in range(25)]
    assert all(row["wrong"] == 0 and row["time_us"] > 0 for row in report["rows"]), report
    peer = report["peer"]
    assert peer["name"].startswith("NCCL ") and peer["ranks"] == min(2, gpus)
    assert all(row["wrong"] == 0 for row in peer["rows"]), peer
    assert len(report["ratios"]) == len(report["rows"])
    assert all(ratio["time"] > 0 for ratio in report["ratios"])


@pytest.mark.parametrize("dtype,reduce", [("float16", "sum"), ("bfloat16", "max"),
                                          ("int32", "min"), ("float64", "product")])
def test_device_gpu_dtypes_table(daemon, dtype, reduce):
    skip_without_gpu(f"bench_device_test.test_device_gpu_dtypes_table[{dtype}-{reduce}]")
    r = ctl("bench", "--sockets", daemon.socket, "--device", "gpu", "--np", "2", "--dtype", dtype,
            "--reduce", reduce, "--sizes", "2K,1M", "--iters", "3", "--check", timeout_s=300)
    assert r.returncode == 0, (r.stderr, daemon.read_log())
    assert "# device: gpu" in r.stdout
    assert "# Out of bounds values : 0 OK" in r.stdout
    assert "# peer: NCCL" in r.stdout and "time ratio" in r.stdout, r.stdout
