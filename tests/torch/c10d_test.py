"""The torch.distributed backend "allreduced" on real processes over real daemons (2 daemons x 2
processes, and 1 x 2): every collective it serves, checked on every rank (c10d_worker.py ops),
and (2 x 2) DistributedDataParallel training that ends with the same parameters on every rank
as the same script on gloo, torch's own CPU backend, in the same run; a rank lost mid-job fails
the others' collectives with DistBackendError."""
import contextlib
import os
import sys
import tempfile

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster, group_outputs  # noqa: E402
from allreduced.launch import RankGroup  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")


def run_workers(sockets, per_host, backend, scenario, out_dir, expect_ok=None):
    """`per_host` c10d_worker processes per daemon socket; asserts that each rank (of
    `expect_ok`, default all) exited 0 and printed OK; their outputs."""
    env = {"PYTHONPATH": PACKAGE_DIR, "ALLREDUCED_CLIENT_LIB": os.environ["ARD_BIN_CLIENT_LIB"],
           "OMP_NUM_THREADS": "1"}
    command = [sys.executable, os.path.join(HERE, "c10d_worker.py"), backend, scenario, out_dir]
    group = RankGroup(sockets, per_host, command, job=f"c10d-{backend}-{scenario}", env=env,
                      text=True)
    outputs = group_outputs(group, timeout_s=400)
    for rank, (rc, out) in enumerate(outputs):
        if expect_ok is None or rank in expect_ok:
            assert rc == 0 and f"OK {scenario}" in out, out
    return outputs


@contextlib.contextmanager
def daemons(hosts):
    """The sockets of `hosts` daemons, stopped at the end."""
    cluster = Cluster(host_timeout_ms=10000)
    try:
        yield [cluster.add(f"c10d-{i}").socket for i in range(hosts)]
    finally:
        cluster.close()


@pytest.mark.parametrize("hosts", [1, 2], ids=["1x2", "2x2"])
def test_collectives(hosts):
    with daemons(hosts) as sockets, tempfile.TemporaryDirectory() as out_dir:
        run_workers(sockets, 2, "allreduced", "ops", out_dir)


def test_ddp_matches_gloo():
    with daemons(2) as sockets:
        ddp_matches_gloo(sockets, 2)


def test_a_lost_rank_fails_the_others_collectives():
    with daemons(2) as sockets, tempfile.TemporaryDirectory() as out_dir:
        outputs = run_workers(sockets, 2, "allreduced", "lost_rank", out_dir, expect_ok=[0, 2, 3])
    assert outputs[1][0] == 3, outputs[1][1]
    for rank in (0, 2, 3):
        assert "ERROR allreduced: " in outputs[rank][1], outputs[rank][1]


def ddp_matches_gloo(sockets, per_host):
    size = len(sockets) * per_host
    params = {}
    for backend in ("allreduced", "gloo"):
        with tempfile.TemporaryDirectory() as out_dir:
            run_workers(sockets, per_host, backend, "ddp", out_dir)
            params[backend] = [torch.load(os.path.join(out_dir, f"rank{r}.pt"))
                               for r in range(size)]
            params["initial"] = torch.load(os.path.join(out_dir, "initial.pt"))
    for r in range(size):
        for mine, first in zip(params["allreduced"][r], params["allreduced"][0]):
            assert torch.equal(mine, first), f"rank {r} differs from rank 0"
        # gloo may add a bucket's gradients in another order: equal up to float rounding.
        for mine, gloo in zip(params["allreduced"][r], params["gloo"][r]):
            assert torch.allclose(mine, gloo, rtol=1e-5, atol=1e-6), (mine, gloo)
        start = params["initial"]
        assert all(not torch.allclose(a, b) for a, b in zip(params["gloo"][r], start)), "trained"
