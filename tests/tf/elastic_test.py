"""Elastic training with real daemons and real TensorFlow processes (elastic_worker.py): a worker
SIGKILLed (daemon alive) on 2 hosts x 2 ranks, a whole host (daemon and workers) SIGKILLed on 3
x 2, the Keras idiom through a shrink and a grow, a job that grows when a worker joins on a
running host, one that grows onto a host (a daemon) added mid-run, more ranks than max_np (the
last in order refused), fewer than min_np after the timeout, and the reset limit. Survivors roll
back to their last commit, re-form with dense ranks, and end with the reference path's weights,
all ranks identical."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import (Cluster, WatchedJob, ctl, host_states, status_json,  # noqa: E402
                     wait_until)

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")
WORKER = os.path.join(HERE, "elastic_worker.py")
# Formation waits this long for a generation's ranks: generous, as TensorFlow workers started
# together can reach their daemon tens of seconds apart on a loaded machine; the min_np case
# waits out its own, shorter timeout.
FORM_TIMEOUT_MS = 60000
MIN_NP_TIMEOUT_MS = 8000


def base_env(min_np, extra=None):
    return dict(extra or {}, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
                ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"],
                ALLREDUCED_ELASTIC_MIN_NP=str(min_np))


class Job(WatchedJob):
    """`per_host` elastic workers on each daemon socket; their output lines by start rank."""

    def __init__(self, sockets, per_host, min_np, job, extra_env=None, give_rank=True):
        super().__init__(sockets, per_host, [sys.executable, WORKER], job,
                         base_env(min_np, extra_env), give_rank=give_rank)

    def finals(self, ranks):
        out = {}
        for r in ranks:
            _, rank, size, rest = self.line(r, "FINAL ").split(" ", 3)
            weights, flags = rest.rsplit("] ", 1)
            out[r] = (int(rank), int(size), json.loads(weights + "]"), flags)
        return out


def assert_finished_alike(job, survivors, size):
    finals = job.finals(survivors)
    assert sorted(f[0] for f in finals.values()) == list(range(size)), job.output()
    assert all(f[1] == size for f in finals.values()), job.output()
    weights = [f[2] for f in finals.values()]
    assert all(w == weights[0] for w in weights), job.output()
    assert all("reference=True" in f[3] for f in finals.values()), job.output()
    return finals


def resumed_after_death(job, victim, survivor):
    died = float(job.line(victim, "DIE ").split()[1])
    resumed = float(job.line(survivor, "RESUMED ").split()[1])
    return resumed - died


def test_a_killed_worker_shrinks_the_job_and_the_survivors_finish():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"el-w{i}", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
                   for i in range(2)]
        job = Job([d.socket for d in daemons], 2, 2, "elastic-worker",
                  {"ELASTIC_DIE_AT": "1:5", "ELASTIC_STEPS": "16"})
        codes = job.wait()
        assert codes[1] == -signal.SIGKILL, job.output()
        assert [codes[r] for r in (0, 2, 3)] == [0, 0, 0], job.output() + cluster.logs()
        finals = assert_finished_alike(job, [0, 2, 3], 3)
        assert [finals[r][0] for r in (0, 2, 3)] == [0, 1, 2]  # dense, order kept
        # The survivors re-form without waiting for a host timeout (10 s here).
        assert resumed_after_death(job, 1, 0) < 5.0, job.output()
    finally:
        cluster.close()


def test_a_lost_host_shrinks_the_job_to_the_other_hosts():
    cluster = Cluster(host_timeout_ms=1000)
    try:
        daemons = [cluster.add(f"el-h{i}", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
                   for i in range(3)]
        job = Job([d.socket for d in daemons], 2, 2, "elastic-host",
                  {"ELASTIC_STEPS": "40", "ELASTIC_SLEEP_S": "0.1"})
        job.wait_line(0, "STEP 6 ")
        killed_at = time.time()
        daemons[2].kill()
        job.group.kill(ranks=[4, 5])
        codes = job.wait()
        assert [codes[r] for r in range(4)] == [0] * 4, job.output() + cluster.logs()
        assert_finished_alike(job, [0, 1, 2, 3], 4)
        resumed = float(job.line(0, "RESUMED ").split()[1])
        print(f"BENCH host kill -> first collective of the new generation: "
              f"{resumed - killed_at:.2f} s (host_timeout 1.0 s, machine under load)")
    finally:
        cluster.close()


def test_a_host_update_queued_on_the_state_interrupts_every_rank():
    """Horovod's semi-private State API that elastic scripts use: a host update queued with
    state.on_hosts_updated() on one rank makes the next commit raise HostsUpdatedInterrupt on
    every rank (agreed in one allreduce); the job re-forms and ends on the reference path."""
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemon = cluster.add("el-m", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
        job = Job([daemon.socket], 2, 2, "elastic-host-message",
                  {"ELASTIC_STEPS": "8", "ELASTIC_COMMIT": "2", "ELASTIC_HOST_MESSAGE_AT": "1:3"})
        codes = job.wait()
        assert codes == [0, 0], job.output() + cluster.logs()
        assert all(any(l.startswith("RESUMED ") for l in lines) for lines in job.lines), (
            job.output())
        assert_finished_alike(job, [0, 1], 2)
    finally:
        cluster.close()


@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3", "tf_keras"])
def test_the_keras_idiom_survives_a_killed_worker(legacy):
    """Also under TF_USE_LEGACY_KERAS=1: the elastic callbacks are tf_keras callbacks there."""
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemon = cluster.add("el-k", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
        job = Job([daemon.socket], 3, 2, f"elastic-keras-{legacy}",
                  {"ELASTIC_MODE": "keras", "ELASTIC_DIE_AT": "2:6", "ELASTIC_STEPS": "12",
                   "ELASTIC_COMMIT": "4", "TF_USE_LEGACY_KERAS": legacy})
        codes = job.wait()
        assert codes[:2] == [0, 0] and codes[2] == -signal.SIGKILL, job.output() + cluster.logs()
        assert_finished_alike(job, [0, 1], 2)
    finally:
        cluster.close()


def test_a_joining_worker_grows_the_job_and_receives_the_state():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemon = cluster.add("el-g", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
        job = Job([daemon.socket], 2, 2, "elastic-grow",
                  {"ELASTIC_STEPS": "30", "ELASTIC_SLEEP_S": "0.1", "ELASTIC_WAIT_AT": "10:3"})
        job.wait_line(0, "STEP 4 ")
        env = dict(os.environ, **base_env(2, {"ELASTIC_STEPS": "30", "ELASTIC_SLEEP_S": "0.1"}),
                   ALLREDUCED_SOCKET=daemon.socket, ALLREDUCED_JOB="elastic-grow",
                   ALLREDUCED_RANK="2", ALLREDUCED_SIZE="3", ALLREDUCED_LOCAL_RANK="2",
                   ALLREDUCED_LOCAL_SIZE="3")
        joiner = subprocess.run([sys.executable, WORKER], env=env, capture_output=True, text=True,
                                timeout=400)
        codes = job.wait()
        assert codes == [0, 0] and joiner.returncode == 0, (
            job.output() + joiner.stdout + joiner.stderr + cluster.logs())
        finals = job.finals([0, 1])
        assert [(f[0], f[1]) for f in finals.values()] == [(0, 3), (1, 3)], job.output()
        assert finals[0][2] == finals[1][2] and "reference=True" in finals[0][3], job.output()
        assert all("resets=1" in f[3] for f in finals.values()), job.output()  # one re-formation
        joined = next(l for l in joiner.stdout.splitlines() if l.startswith("FINAL "))
        assert joined.startswith("FINAL 2 3 ") and "reference=True" in joined, joiner.stdout
        assert json.dumps(finals[0][2]) in joined, joiner.stdout
    finally:
        cluster.close()


def start_joiners(socket, job, first_rank, count, extra_env):
    """`count` workers of elastic job `job` on the daemon at `socket`, started by hand (a
    launcher would), in rank order after `first_rank`; their output lines are text pipes."""
    procs = []
    for i in range(count):
        env = dict(os.environ, **base_env(2, extra_env), ALLREDUCED_SOCKET=socket,
                   ALLREDUCED_JOB=job, ALLREDUCED_RANK=str(first_rank + i),
                   ALLREDUCED_SIZE=str(first_rank + count), ALLREDUCED_LOCAL_RANK=str(i),
                   ALLREDUCED_LOCAL_SIZE=str(count))
        procs.append(subprocess.Popen([sys.executable, WORKER], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def test_a_host_added_mid_run_grows_the_job_across_hosts():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        flags = [f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"]
        first = cluster.add("el-a", extra_flags=flags)
        steps = {"ELASTIC_STEPS": "30", "ELASTIC_SLEEP_S": "0.1"}
        job = Job([first.socket], 2, 2, "elastic-host-added", dict(steps, ELASTIC_WAIT_AT="10:4"))
        job.wait_line(0, "STEP 4 ")
        # A daemon that was not in the cluster when the job formed joins it, and two workers
        # start there: the running ranks hear of them at their next commit (through the
        # coordinator), the job re-forms across both hosts, the new ranks get rank 0's state.
        added = cluster.add("el-b", extra_flags=flags)
        wait_until(lambda: (host_states(first.address) or {}).get("el-b", {}).get("state") == "UP",
                   15, "el-b to join the cluster")
        joiners = start_joiners(added.socket, "elastic-host-added", 2, 2, steps)
        outputs = [p.communicate(timeout=400)[0] for p in joiners]
        codes = job.wait()
        everything = job.output() + "".join(outputs) + cluster.logs()
        assert codes == [0, 0] and [p.returncode for p in joiners] == [0, 0], everything
        finals = job.finals([0, 1])
        assert [(f[0], f[1]) for f in finals.values()] == [(0, 4), (1, 4)], everything
        assert all("reference=True" in f[3] and "resets=1" in f[3] for f in finals.values()), (
            everything)  # one re-formation: HostsUpdatedInterrupt, not a lost rank
        weights = json.dumps(finals[0][2])
        assert json.dumps(finals[1][2]) == weights, everything
        for rank, out in zip((2, 3), outputs):
            final = next(l for l in out.splitlines() if l.startswith("FINAL "))
            assert final.startswith(f"FINAL {rank} 4 ") and "reference=True" in final, everything
            assert weights in final, everything
        # `allreducectl status` keeps the job's history on its newest generation's entry (once
        # both hosts reported that their ranks left, which follows the workers' exit).
        def changes():
            status = status_json(first.address) or {"jobs": []}
            entries = [j for j in status["jobs"]
                       if j["name"] == "elastic-host-added" and j["elastic_changes"]]
            assert len(entries) <= 1, status
            return [(c["generation"], c["change"], c["hosts"])
                    for c in (entries[0]["elastic_changes"] if entries else [])]
        wait_until(lambda: ("2", "ended", []) in changes(), 15, "generation 2 to end")
        got = changes()
        assert got[:2] == [("1", "formed", ["el-a"]), ("1", "hosts updated", ["el-b"])], got
        # Generation 1's end and generation 2's formation may be recorded either way round.
        assert sorted(got[2:]) == [("1", "ended", []), ("2", "ended", []),
                                   ("2", "grown", ["el-a", "el-b"])], got
        table = ctl("--daemon", first.address, "status").stdout
        assert "generation 2 grown: 4 ranks on el-a, el-b (+el-b)" in table, table
    finally:
        cluster.close()


def test_the_keras_idiom_grows_when_a_worker_joins():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemon = cluster.add("el-kg", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
        keras_env = {"ELASTIC_MODE": "keras", "ELASTIC_STEPS": "16", "ELASTIC_COMMIT": "4",
                     "ELASTIC_SLEEP_S": "0.1"}
        job = Job([daemon.socket], 2, 2, "elastic-keras-grow",
                  dict(keras_env, ELASTIC_WAIT_AT="8:3"))
        job.wait_line(0, "STEP 2 ")
        env = dict(os.environ, **base_env(2, keras_env), ALLREDUCED_SOCKET=daemon.socket,
                   ALLREDUCED_JOB="elastic-keras-grow", ALLREDUCED_RANK="2",
                   ALLREDUCED_SIZE="3", ALLREDUCED_LOCAL_RANK="2", ALLREDUCED_LOCAL_SIZE="3")
        joiner = subprocess.run([sys.executable, WORKER], env=env, capture_output=True, text=True,
                                timeout=400)
        codes = job.wait()
        assert codes == [0, 0] and joiner.returncode == 0, (
            job.output() + joiner.stdout + joiner.stderr + cluster.logs())
        finals = job.finals([0, 1])
        assert [(f[0], f[1]) for f in finals.values()] == [(0, 3), (1, 3)], job.output()
        assert finals[0][2] == finals[1][2] and "reference=True" in finals[0][3], job.output()
        joined = next(l for l in joiner.stdout.splitlines() if l.startswith("FINAL "))
        assert joined.startswith("FINAL 2 3 ") and "reference=True" in joined, joiner.stdout
        assert json.dumps(finals[0][2]) in joined, joiner.stdout
    finally:
        cluster.close()


def test_more_ranks_than_max_np_form_max_np_and_the_last_in_order_is_refused():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"el-m{i}", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
                   for i in range(2)]
        # 2 hosts x 2 workers without ranks for max_np 3: the first three in order (host el-m0's
        # two, then el-m1's first to register) train; el-m1's other one is refused.
        job = Job([d.socket for d in daemons], 2, 2, "elastic-max-np",
                  {"ALLREDUCED_ELASTIC_MAX_NP": "3", "ELASTIC_STEPS": "12"}, give_rank=False)
        codes = job.wait()
        everything = job.output() + cluster.logs()
        assert codes[:2] == [0, 0] and sorted(codes[2:]) == [0, 1], everything
        refused = 2 if codes[2] != 0 else 3
        kept = [r for r in range(4) if r != refused]
        finals = assert_finished_alike(job, kept, 3)
        # el-m0's two first (in the order they registered there), then el-m1's.
        assert sorted(finals[r][0] for r in (0, 1)) == [0, 1] and finals[kept[2]][0] == 2, (
            everything)
        said = "\n".join(job.lines[refused])
        assert "RuntimeError" in said and "formed with 3 ranks, its max_np" in said, everything
        assert "on host el-m1 comes after them in rank order" in said, everything
    finally:
        cluster.close()


def test_below_min_np_the_job_stops_after_the_timeout():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemon = cluster.add("el-m", extra_flags=[f"--job_form_timeout_ms={MIN_NP_TIMEOUT_MS}"])
        job = Job([daemon.socket], 2, 2, "elastic-min", {"ELASTIC_DIE_AT": "1:3"})
        start = time.monotonic()
        codes = job.wait()
        assert codes[1] == -signal.SIGKILL and codes[0] != 0, job.output()
        text = "\n".join(job.lines[0])
        assert "fewer than min_np 2" in text and "did not form within 8s" in text, text
        assert time.monotonic() - start >= MIN_NP_TIMEOUT_MS / 1000
    finally:
        cluster.close()


def test_the_reset_limit_stops_a_job_whose_ranks_keep_dying():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemon = cluster.add("el-r", extra_flags=[f"--job_form_timeout_ms={FORM_TIMEOUT_MS}"])
        job = Job([daemon.socket], 4, 1, "elastic-limit",
                  {"ELASTIC_DIE_AT": "3:3", "ALLREDUCED_ELASTIC_RESET_LIMIT": "0"})
        codes = job.wait()
        assert codes[:3] == [0, 0, 0], job.output()  # no limit: one reset, then done
        job = Job([daemon.socket], 4, 1, "elastic-limit2",
                  {"ELASTIC_DIE_AT": "3:3,2:6", "ALLREDUCED_ELASTIC_RESET_LIMIT": "1"})
        codes = job.wait()
        assert codes[2:] == [-signal.SIGKILL] * 2 and codes[:2] != [0, 0], job.output()
        for rank in (0, 1):
            assert any("reset limit of 1" in l for l in job.lines[rank]), job.output()
    finally:
        cluster.close()
