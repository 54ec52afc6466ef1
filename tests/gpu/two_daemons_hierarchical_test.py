"""On a GPU host: two daemons on one machine share GPU 0 in hierarchical mode. Each daemon is its
own "host" (own port, local socket and host name, --gpu_mode=hierarchical); one client process
per daemon puts its tensors on GPU 0 and submits them with ard_submit_device (through
`allreducectl bench --device gpu --sockets A,B --np 1`, real processes). The job spans both
hosts: each rank registers its GPU on its first device submit, then every allreduce must give the
exact result (--check compares every element of the warm-up and last results). Skipped with
"SKIPPED (no GPU)" elsewhere."""
import json

import pytest

from gpu_host import Cluster, all_up, ctl, skip_without_gpu, wait_until


@pytest.fixture(scope="module")
def two_hosts():
    skip_without_gpu("two_daemons_hierarchical_test")
    cluster = Cluster()
    try:
        flags = ["--gpu_mode=hierarchical"]
        cluster.add("gpu-host-a", extra_flags=flags)
        cluster.add("gpu-host-b", extra_flags=flags)
        wait_until(lambda: all_up(cluster), 15, "both daemons UP")
        yield cluster
    finally:
        cluster.close()


# n = 2 ranks and small-integer inputs keep every case exact, average included.
@pytest.mark.parametrize("dtype,reduce", [("float32", "sum"), ("float16", "sum"),
                                          ("bfloat16", "max"), ("int32", "min"),
                                          ("float64", "average"), ("int64", "product")])
def test_cross_host_allreduce_on_one_shared_gpu(two_hosts, dtype, reduce):
    a, b = two_hosts.daemons["gpu-host-a"], two_hosts.daemons["gpu-host-b"]
    r = ctl("bench", "--sockets", f"{a.socket},{b.socket}", "--np", "1", "--device", "gpu",
            "--peer", "none", "--dtype", dtype, "--reduce", reduce, "--sizes", "8,4K,1M,16M",
            "--warmup", "2", "--iters", "5", "--check", "--json", timeout_s=300)
    assert r.returncode == 0, (r.stderr, two_hosts.logs())
    report = json.loads(r.stdout)
    assert report["ranks"] == 2 and report["np"] == 1 and len(report["sockets"]) == 2
    assert report["device"] == "gpu"
    assert [row["size"] for row in report["rows"]] == [8, 4096, 1 << 20, 16 << 20]
    assert all(row["wrong"] == 0 and row["time_us"] > 0 for row in report["rows"]), report
