"""On a GPU host: a trainer SIGKILLed in the middle of a collective. Jobs "victim" and "bystander"
share one daemon and GPU 0, two trainer processes each (`allreducectl bench --device gpu` workers:
the client library's device path, real processes). One worker of "victim" is SIGKILLed while its
job runs back-to-back 64 MiB allreduces. The daemon must survive; "victim" must end with an error
on its other rank, not hang; "bystander", on the same GPU, must finish with exact results; and a
job started afterwards on that GPU must work (no sticky CUDA error poisoned the daemon's context).
Skipped with "SKIPPED (no GPU)" elsewhere."""
import json
import os
import signal
import subprocess

import pytest

from gpu_host import Cluster, ctl, skip_without_gpu, status_json, wait_until
from harness import binary


@pytest.fixture
def daemon():
    skip_without_gpu("trainer_kill_test")
    cluster = Cluster()
    try:
        yield cluster.add("gpu-kill")
    finally:
        cluster.close()


def bench(daemon, job, *args):
    return subprocess.Popen(
        [binary("allreducectl"), "bench", "--sockets", daemon.socket, "--device", "gpu", "--np",
         "2", "--peer", "none", "--job", job, "--timeout_ms", "60000"] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def job_on_gpu(daemon, name):
    """The job's rank pids once every rank registered its GPU, else None."""
    status = status_json(daemon.address) or {"jobs": []}
    for job in status["jobs"]:
        if job["name"] != name or job.get("state") != "running":
            continue
        ranks = job.get("ranks", [])
        devices = [d for hr in ranks for d in hr.get("gpu_devices", [])]
        pids = [p for hr in ranks for p in hr.get("pids", [])]
        if len(devices) == 2 and all(d >= 0 for d in devices) and job.get("gpu_plan"):
            return pids
    return None


def test_sigkill_mid_collective_leaves_the_daemon_and_other_jobs_working(daemon):
    victim = bench(daemon, "victim", "--sizes", "64M", "--warmup", "0", "--iters", "1000000")
    bystander = bench(daemon, "bystander", "--sizes", "4K,1M,16M", "--warmup", "2", "--iters",
                      "50", "--check", "--json")
    try:
        pids = wait_until(lambda: job_on_gpu(daemon, "victim"), 60, "job victim on the GPU")
        os.kill(pids[0], signal.SIGKILL)
        out, err = victim.communicate(timeout=90)  # the other rank fails; it must not hang
        assert victim.returncode != 0, out
        print("victim ended:", err.strip().splitlines()[-3:])
        assert daemon.proc.poll() is None, daemon.read_log()

        out, err = bystander.communicate(timeout=120)
        assert bystander.returncode == 0, (err, daemon.read_log())
        assert all(row["wrong"] == 0 for row in json.loads(out)["rows"])

        after = ctl("bench", "--sockets", daemon.socket, "--device", "gpu", "--np", "2", "--peer",
                    "none", "--job", "after", "--sizes", "4K,16M", "--iters", "5", "--check",
                    timeout_s=120)
        assert after.returncode == 0, (after.stderr, daemon.read_log())
        assert daemon.proc.poll() is None, daemon.read_log()
    finally:
        for p in (victim, bystander):
            if p.poll() is None:
                p.kill()
                p.communicate()
