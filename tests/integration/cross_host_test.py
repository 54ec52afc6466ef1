"""Three daemons on loopback, each one host with its own client processes, running one job
across them: every collective x op x dtype checked against a reference (ranks within a host in
rank order, then hosts; inputs whose sums and products are exact in any order, since the hosts
combine in their algorithm's order) and bit-identical across ranks; 1,000 tensors a
step fused across hosts; two jobs at once; a trainer killed and a daemon SIGKILLed mid-step (the
others get errors naming them; the next job works after the daemon restarts); status and stalls;
a job that failed shows as failed in the coordinator's status at once; a daemon SIGKILLed between
collectives fails its job long before the host timeout, and a normal end fails nothing."""
import signal
import threading
import time

import pytest

from harness import (Cluster, Workers, check_adasum, ctl, lines_with, status_json, wait_until,
                     workers_across)

HOST_TIMEOUT_MS = 1000
LONG_HOST_TIMEOUT_MS = 30000  # the `pair` fixture's: heartbeats cannot be what fails a job


@pytest.fixture
def cluster():
    c = Cluster(heartbeat_ms=100, host_timeout_ms=HOST_TIMEOUT_MS)
    for name in ("h-a", "h-b", "h-c"):
        c.add(name, extra_flags=["--stall_warning_ms=300", "--job_form_timeout_ms=5000"])
    wait_until(lambda: all_up(c), 10, "three hosts UP")
    yield c
    c.close()


@pytest.fixture
def pair():
    """h-a (the coordinator) and h-b, with a 30 s host timeout."""
    c = Cluster(heartbeat_ms=100, host_timeout_ms=LONG_HOST_TIMEOUT_MS)
    for name in ("h-a", "h-b"):
        c.add(name)
    wait_until(lambda: all_up(c), 10, "two hosts UP")
    yield c
    c.close()


def all_up(c):
    s = status_json(c.daemons["h-a"].address)
    return s and sum(h["state"] == "UP" for h in s["hosts"]) == len(c.daemons)


def sockets(c, names=("h-a", "h-b", "h-c")):
    return [c.daemons[n].socket for n in names]


def read_lines(workers):
    """Each process's output lines so far, filled in by reader threads as they come."""
    lines = [[] for _ in workers.procs]

    def read(i):
        for line in workers.procs[i].stdout:
            lines[i].append(line.rstrip("\n"))
    for i in range(len(workers.procs)):
        threading.Thread(target=read, args=(i,), daemon=True).start()
    return lines


def job_entry(cluster, job):
    s = status_json(cluster.daemons["h-a"].address)
    return next((j for j in (s or {}).get("jobs", []) if j["name"] == job), None)


def assert_all_ok(results):
    for rank, (rc, out) in enumerate(results):
        assert rc == 0 and lines_with(out, "DONE") and not lines_with(out, "MISMATCH"), \
            f"process {rank} exited {rc}:\n" + "\n".join(out)


def test_every_collective_across_three_hosts(cluster):
    results = workers_across(sockets(cluster), "xmatrix", 2, "matrix").wait(timeout_s=180)
    assert_all_ok(results)
    topo = sorted(lines_with(out, "TOPOLOGY")[0].split()[1:] for _, out in results)
    # rank size local_rank local_size cross_rank cross_size
    assert [t[0] for t in topo] == [str(r) for r in range(6)]
    assert all(t[1] == "6" and t[3] == "2" and t[5] == "3" for t in topo)
    assert [t[4] for t in topo] == ["0", "0", "1", "1", "2", "2"]
    per_rank = [dict(l.split()[1:3] for l in lines_with(out, "RESULT")) for _, out in results]
    shared = [c for c in per_rank[0] if c.split(".")[0] in
              ("allreduce", "allgather", "broadcast", "scaled", "group")]
    assert len(shared) > 60
    for case in shared:
        assert len({r[case] for r in per_rank}) == 1, case


def test_thousand_tensors_per_step_across_hosts(cluster):
    assert_all_ok(workers_across(sockets(cluster), "xmany", 2, "many").wait(timeout_s=180))


def test_two_jobs_at_once_across_hosts(cluster):
    a = workers_across(sockets(cluster, ("h-a", "h-b")), "xa", 2, "matrix", seed=3)
    b = workers_across(sockets(cluster), "xb", 1, "many", seed=4)
    assert_all_ok(a.wait(timeout_s=180))
    assert_all_ok(b.wait(timeout_s=180))


def test_mismatch_across_hosts_reaches_every_rank(cluster):
    results = workers_across(sockets(cluster), "xmm", 1, "mismatch").wait(timeout_s=60)
    assert_all_ok(results)
    for _, out in results:
        assert lines_with(out, "ERROR mismatched")[0].endswith(
            "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2, 3], but "
            "another rank sent a tensor of shape [3, 3].")


def test_join_across_hosts(cluster):
    results = workers_across(sockets(cluster), "xjoin", 2, "join").wait(timeout_s=60)
    assert_all_ok(results)
    assert all("JOINED last_rank=5" in out for _, out in results)


def wait_stalled(cluster, job, missing=None):
    """The job's entry in status once it reports a stalled tensor (missing exactly `missing`
    when given: reports from the hosts and the coordinator converge within a heartbeat)."""
    def stalled():
        s = status_json(cluster.daemons["h-a"].address)
        for j in (s or {}).get("jobs", []):
            if j["name"] == job and any(missing is None or t["missing_ranks"] == missing
                                        for t in j.get("stalled", [])):
                return j
        return None
    return wait_until(stalled, 15, f"a stall report for {job}")


def test_adasum_across_two_and_three_hosts(cluster):
    """Adasum across hosts matches the reference (ranks' tree per host, then hosts' tree) and is
    bit-identical on every rank; with two ranks on each of two hosts the tree is the one-host tree
    of four ranks, bit for bit (the same cases run as one job on one daemon)."""
    two = check_adasum(
        workers_across(sockets(cluster, ("h-a", "h-b")), "xadasum2", 2, "adasum").wait(180))
    check_adasum(workers_across(sockets(cluster), "xadasum3", 2, "adasum").wait(180))
    one = check_adasum(
        Workers(cluster.daemons["h-c"].socket, "adasum-one-host", 4, "adasum").wait(180))
    assert two == one


def test_killed_trainer_on_another_host_is_named(cluster):
    workers = workers_across(sockets(cluster), "xkill", 2, "stuck")
    victim = workers.procs[-1]  # rank 5, on h-c: never submits
    job = wait_stalled(cluster, "xkill", missing=[5])
    stall = [t for t in job["stalled"] if t["name"] == "stuck"][0]
    assert stall["submitted_ranks"] == [0, 1, 2, 3, 4]
    killed = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    results = workers.wait(timeout_s=30)
    elapsed = time.monotonic() - killed
    for rank, (rc, out) in enumerate(results[:5]):
        error = lines_with(out, "ERROR stuck")
        assert error, f"rank {rank}:\n" + "\n".join(out)
        assert f"rank 5 (pid {victim.pid}) on host h-c" in error[0], error
    assert elapsed < 3, f"errors arrived {elapsed:.2f}s after the kill"
    assert_all_ok(workers_across(sockets(cluster), "xkill", 1, "many").wait(timeout_s=60))


def test_killed_daemon_is_named_and_rejoins(cluster):
    workers = workers_across(sockets(cluster), "xdown", 1, "stuck")
    wait_stalled(cluster, "xdown")
    victim = cluster.daemons["h-c"]
    hanging = workers.procs[2]  # rank 2, on h-c, never submits: it sleeps until killed
    workers.procs = workers.procs[:2]
    killed = time.monotonic()
    victim.proc.kill()
    victim.proc.wait()
    results = workers.wait(timeout_s=30)
    elapsed = time.monotonic() - killed
    hanging.kill()
    hanging.communicate()
    for rank, (rc, out) in enumerate(results):
        # The coordinator sees h-c's job stream end (0.5 s grace) or h-c DOWN, whichever first.
        error = lines_with(out, "ERROR stuck")
        assert error and ("host h-c is DOWN" in error[0] or
                          "host h-c stopped watching job xdown" in error[0]), \
            f"rank {rank}:\n" + "\n".join(out)
    assert elapsed < HOST_TIMEOUT_MS / 1000 + 3, f"errors after {elapsed:.2f}s"
    victim.start()
    wait_until(lambda: all_up(cluster), 10, "h-c UP again")
    assert_all_ok(workers_across(sockets(cluster), "xdown", 1, "many").wait(timeout_s=60))


def test_status_merges_a_cross_host_job(cluster):
    workers = workers_across(sockets(cluster), "xstatus", 1, "stuck")
    try:
        def merged():
            s = status_json(cluster.daemons["h-b"].address)
            jobs = [j for j in (s or {}).get("jobs", []) if j["name"] == "xstatus"]
            return len(jobs) == 1 and len(jobs[0]["hosts"]) == 3 and jobs[0]
        job = wait_until(merged, 15, "one merged job entry")
        assert sorted(job["hosts"]) == ["h-a", "h-b", "h-c"]
        placement = {hr["host"]: hr["ranks"] for hr in job["ranks"]}
        assert placement == {"h-a": [0], "h-b": [1], "h-c": [2]}
        table = ctl("--daemon", cluster.daemons["h-c"].address, "status").stdout
        assert "h-a:[0] h-b:[1] h-c:[2]" in table
    finally:
        workers.kill()


def test_job_of_a_killed_daemon_shows_failed_at_once(cluster):
    """h-b's daemon is SIGKILLed while a 2x2 job of h-a and h-b runs allreduces: once the ranks
    on h-a got their error, the coordinator's status shows the job failed with the reason within
    2 s (not `running` from h-b's last report until h-b times out), and still after h-b is DOWN."""
    workers = workers_across(sockets(cluster, ("h-a", "h-b")), "xfail", 2, "steps")
    lines = read_lines(workers)
    try:
        wait_until(lambda: all("STEPPING" in out for out in lines), 30, "every rank stepping")
        cluster.daemons["h-b"].proc.kill()
        cluster.daemons["h-b"].proc.wait()
        for p in workers.procs[:2]:  # the ranks on h-a
            p.wait(timeout=30)
        errored = time.monotonic()
        for out in lines[:2]:
            assert lines_with(out, "ERROR step"), "\n".join(out)

        def failed():
            s = status_json(cluster.daemons["h-a"].address)
            jobs = [j for j in (s or {}).get("jobs", []) if j["name"] == "xfail"]
            return jobs and jobs[0]["state"] == "failed" and jobs[0]
        job = wait_until(failed, 10, "job xfail failed in the coordinator's status")
        assert time.monotonic() - errored < 2, f"shown failed {time.monotonic() - errored:.2f}s late"
        assert "h-b" in job["failure"], job
        assert sorted(job["hosts"]) == ["h-a", "h-b"]
        # Still failed (not gone) once h-b is DOWN and its reports no longer count.
        wait_until(lambda: {h["name"]: h["state"] for h in
                            status_json(cluster.daemons["h-a"].address)["hosts"]}["h-b"] == "DOWN",
                   10, "h-b DOWN")
        assert failed(), status_json(cluster.daemons["h-a"].address)
    finally:
        workers.kill()


def test_daemon_killed_between_collectives_fails_the_job_at_once(pair):
    """h-b's daemon is SIGKILLed while a 2x2 job sits between two collectives (h-a's ranks wait on
    "second", h-b's ranks pause; the data plane is idle): the coordinator sees h-b's event stream
    end and aborts the job, so h-a's ranks get an error naming h-b within a few seconds, long
    before the 30 s host timeout, and status shows the job failed with that reason."""
    workers = workers_across(sockets(pair, ("h-a", "h-b")), "xbetween", 2, "between")
    lines = read_lines(workers)
    try:
        wait_until(lambda: all("SUBMITTED second" in out for out in lines[:2]) and
                   all("PAUSED" in out for out in lines[2:]), 30, "the job between collectives")
        pair.daemons["h-b"].proc.kill()
        pair.daemons["h-b"].proc.wait()
        errors = wait_until(lambda: all(lines_with(out, "ERROR second") for out in lines[:2]) and
                            [lines_with(out, "ERROR second")[0] for out in lines[:2]],
                            LONG_HOST_TIMEOUT_MS / 1000 / 3, "h-a's ranks to get their error")
        for error in errors:
            assert "host h-b stopped watching job xbetween" in error, errors
        job = wait_until(lambda: (j := job_entry(pair, "xbetween")) and
                         j["state"] == "failed" and j, 5, "job xbetween failed in status")
        assert "host h-b stopped watching" in job["failure"], job
    finally:
        workers.kill()


def test_normal_end_of_a_two_host_job_fails_nothing(pair):
    """Both hosts' ranks finish their steps and exit; h-a's linger 1.5 s after h-b's left (longer
    than the coordinator's grace for a stream that ends before its host's `left`). The job ends
    cleanly: status shows it ended with no failure, and no daemon logged an abort."""
    workers = workers_across(sockets(pair, ("h-a", "h-b")), "xclean", 2, "steps",
                             extra_env={"ARD_STEPS": "20"},
                             host_env=[{"ARD_LINGER_MS": "1500"}, {}])
    results = workers.wait(timeout_s=60)
    for rank, (rc, out) in enumerate(results):
        assert rc == 0 and lines_with(out, "DONE 20"), f"rank {rank}:\n" + "\n".join(out)
    job = wait_until(lambda: (j := job_entry(pair, "xclean")) and j["state"] != "running" and j,
                     10, "job xclean over in status")
    assert job["state"] == "ended" and not job.get("failure"), job
    for name, daemon in pair.daemons.items():
        log = daemon.read_log()
        assert "aborted" not in log and "stopped watching" not in log, f"{name}:\n{log}"
