"""`allreducectl forget HOST` and `allreducectl abort JOB` against real daemons: a DOWN host is
removed from the cluster view and an UP one refused; a running 2-host job is aborted (every rank
gets "job J aborted by root", the job fails with that reason); the refusals: another user (the
CLI run as `nobody` with setpriv), plaintext TCP, a follower asked to forget, an unknown job."""
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from harness import Cluster, binary, ctl, host_states, wait_until, workers_across


@pytest.fixture
def pair():
    # A host is DOWN after 4 s without heartbeats: long enough that a loaded machine (CI) does
    # not abort the tests' jobs with a false DOWN, short enough for the forget test's wait.
    c = Cluster(heartbeat_ms=100, host_timeout_ms=4000)
    for name in ("h-a", "h-b"):
        c.add(name)
    os.chmod(c.workdir, 0o755)  # the admin sockets are reachable by other users (setpriv tests)
    wait_until(lambda: (h := host_states(c.daemons["h-a"].address)) and len(h) == 2 and
               all(x["state"] == "UP" for x in h.values()), 10, "two hosts UP")
    yield c
    c.close()


def admin(daemon, *args, as_nobody=False):
    command = [binary("allreducectl"), "--admin_socket", daemon.socket + ".admin", *args]
    if as_nobody:
        command = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"] + command
    r = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if r.returncode == 1 and "cannot reach the daemon" in r.stderr and "Socket closed" in r.stderr:
        # Known flake, not understood yet: the daemon closed a new admin connection right after
        # the previous one (seen once in CI). The call never reached a handler: retry it once.
        time.sleep(0.2)
        r = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return r


def can_run_as_nobody():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return False
    return subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                           "true"]).returncode == 0


needs_nobody = pytest.mark.skipif(not can_run_as_nobody(),
                                  reason="needs root and setpriv to run the CLI as another user")


def test_forget_removes_a_down_host_and_refuses_an_up_one(pair):
    a, b = pair.daemons["h-a"], pair.daemons["h-b"]
    up = admin(a, "forget", "h-b")
    assert up.returncode == 1
    assert "host h-b is UP" in up.stderr and "only a DOWN host can be forgotten" in up.stderr
    follower = admin(b, "forget", "h-a")
    assert follower.returncode == 1 and "h-b is not the coordinator" in follower.stderr
    unknown = admin(a, "forget", "h-z")
    assert unknown.returncode == 1 and "no host named h-z" in unknown.stderr
    tcp = ctl("--daemon", a.address, "forget", "h-b")
    assert tcp.returncode == 1 and "refused on a plaintext TCP connection" in tcp.stderr

    b.kill()
    wait_until(lambda: host_states(a.address)["h-b"]["state"] == "DOWN", 20, "h-b DOWN")
    if can_run_as_nobody():
        other = admin(a, "forget", "h-b", as_nobody=True)
        assert other.returncode == 1 and "forget needs root; you are nobody" in other.stderr
    done = admin(a, "forget", "h-b")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("forgot host h-b (membership epoch ")
    assert set(host_states(a.address)) == {"h-a"}
    status = ctl("--daemon", a.address, "status")
    assert status.returncode == 0, status.stderr  # no DOWN host left: exit 0, not 3


def start_long_job(pair, job):
    sockets = [pair.daemons[n].socket for n in ("h-a", "h-b")]
    workers = workers_across(sockets, job, 2, "soak", extra_env={"ARD_SOAK_STEPS": "100000000"})
    results = {}
    waiter = threading.Thread(target=lambda: results.update(r=workers.wait(timeout_s=120)))
    waiter.start()

    def running():
        r = ctl("--daemon", pair.daemons["h-a"].address, "jobs", "--json")
        jobs = [j for j in json.loads(r.stdout)["jobs"] if j["name"] == job] if r.stdout else []
        return jobs and jobs[0]["state"] == "running"
    wait_until(running, 20, f"job {job} running")
    return waiter, results


@needs_nobody
def test_abort_is_refused_to_another_user(pair):
    waiter, results = start_long_job(pair, "ab1")
    try:
        other = admin(pair.daemons["h-a"], "abort", "ab1", as_nobody=True)
        assert other.returncode == 1
        assert "job ab1 belongs to uid 0; only its owner or root may abort it (you are nobody)" \
            in other.stderr
    finally:
        done = admin(pair.daemons["h-a"], "abort", "ab1")  # root may: ends the job
        waiter.join(timeout=130)
    assert done.returncode == 0, done.stderr


def test_abort_fails_every_rank_with_the_reason(pair):
    a, b = pair.daemons["h-a"], pair.daemons["h-b"]
    missing = admin(a, "abort", "nope")
    assert missing.returncode == 1 and "no job nope on host h-a" in missing.stderr
    waiter, results = start_long_job(pair, "ab2")
    tcp = ctl("--daemon", b.address, "abort", "ab2")
    assert tcp.returncode == 1 and "refused on a plaintext TCP connection" in tcp.stderr
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "")
    done = admin(b, "abort", "ab2")  # on the other host than the coordinator: it tells everyone
    waiter.join(timeout=130)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"aborted: job ab2 aborted by {user} (failed by host h-b)"
    for rank, (rc, out) in enumerate(results["r"]):
        assert rc != 0, f"rank {rank} kept running"
        assert any(f"job ab2 aborted by {user}" in line for line in out), \
            f"rank {rank}:\n" + "\n".join(out)

    def failed():
        r = ctl("--daemon", a.address, "jobs", "--json")
        jobs = [j for j in json.loads(r.stdout)["jobs"] if j["name"] == "ab2"]
        return jobs and jobs[0]["state"] == "failed" and jobs[0]
    job = wait_until(failed, 10, "the job recorded as failed")
    assert f"aborted by {user}" in job["failure"], job
    again = admin(b, "abort", "ab2")
    assert again.returncode == 1
