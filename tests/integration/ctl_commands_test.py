"""allreducectl as an operator uses it: --version, `status` exit codes (3: a host is DOWN),
`status --watch`, and `jobs` (running and finished jobs, cross-host and single-host, with
duration, throughput and a failure's reason), against real daemons on loopback."""
import json
import signal
import subprocess

import pytest

from harness import (Cluster, Workers, binary, ctl, host_states, lines_with, status_json,
                     wait_until, workers_across)


@pytest.fixture
def cluster():
    c = Cluster(heartbeat_ms=100, host_timeout_ms=1000)
    yield c
    c.close()


def all_up(address, names):
    hosts = host_states(address)
    return hosts is not None and all(n in hosts and hosts[n]["state"] == "UP" for n in names)


def test_both_binaries_print_the_same_version():
    ctl_version = ctl("--version")
    daemon_version = subprocess.run([binary("allreduced"), "--version"], capture_output=True,
                                    text=True, timeout=10)
    assert ctl_version.returncode == 0 and daemon_version.returncode == 0
    name, version = ctl_version.stdout.split()
    assert name == "allreducectl" and version[0].isdigit(), ctl_version.stdout
    assert daemon_version.stdout.split() == ["allreduced", version]


def test_status_exits_3_while_a_host_is_down_and_watch_repeats(cluster):
    a = cluster.add("host-a")
    b = cluster.add("host-b")
    wait_until(lambda: all_up(a.address, ["host-a", "host-b"]), 10, "both hosts UP")
    ok = ctl("--daemon", a.address, "status")
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr

    b.signal(signal.SIGKILL)
    wait_until(lambda: host_states(a.address)["host-b"]["state"] == "DOWN", 10, "host-b DOWN")
    r = ctl("--daemon", a.address, "status")
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert r.stderr == "allreducectl: 1 host(s) DOWN: host-b\n"
    assert "missed heartbeats" in r.stdout
    r = ctl("--daemon", a.address, "status", "--json")
    assert r.returncode == 3
    assert {h["name"]: h["state"] for h in json.loads(r.stdout)["hosts"]}["host-b"] == "DOWN"

    w = ctl("--daemon", a.address, "status", "--watch", "--interval", "0.2", "--count", "3")
    assert w.returncode == 3, w.stderr
    assert w.stdout.count("Every 0.2s: allreducectl status") == 3, w.stdout
    assert w.stdout.count("1 of 2 hosts UP") == 3
    assert "\033[2J" not in w.stdout  # not a terminal: no screen clearing
    assert ctl("status", "--watch", "--json").returncode == 2
    assert ctl("status", "--watch", "--count", "0").returncode == 2


def test_jobs_lists_a_finished_cross_host_job_with_duration_and_throughput(cluster):
    for name in ("h-a", "h-b"):
        cluster.add(name)
    a = cluster.daemons["h-a"]
    wait_until(lambda: all_up(a.address, ["h-a", "h-b"]), 10, "both hosts UP")
    empty = ctl("--daemon", a.address, "jobs")
    assert empty.returncode == 0 and empty.stdout == "No running or recent jobs.\n"

    socks = [cluster.daemons[n].socket for n in ("h-a", "h-b")]
    for rc, out in workers_across(socks, "xjobs", 1, "many").wait(timeout_s=120):
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)

    def ended():
        r = ctl("--daemon", a.address, "jobs", "--json")
        jobs = [j for j in json.loads(r.stdout)["jobs"] if j["name"] == "xjobs"]
        return jobs and jobs[0]["state"] == "ended" and jobs[0]
    job = wait_until(ended, 10, "the job to be recorded as ended")
    assert job["duration_s"] > 0 and int(job["bytes_reduced"]) > 0, job  # uint64: a JSON string
    table = ctl("--daemon", a.address, "jobs")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    for column in ("JOB", "STATE", "DURATION", "ENDED", "THROUGHPUT", "REASON"):
        assert column in header
    assert row.startswith("xjobs ") and " ended " in row and " ago " in row
    assert "/s " in row and "h-a,h-b" in row, row


def test_jobs_lists_ended_and_failed_single_host_jobs_with_state_and_reason(cluster):
    a = cluster.add("host-a")
    for rc, out in Workers(a.socket, "solo-ok", 2, "many").wait(timeout_s=120):
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)
    doomed = Workers(a.socket, "solo-doomed", 2, "stuck")  # rank 1 never submits
    def running():
        s = status_json(a.address)
        return any(j["name"] == "solo-doomed" and j["state"] == "running"
                   for j in (s or {}).get("jobs", []))
    wait_until(running, 15, "solo-doomed running")
    victim = doomed.procs[1]
    victim.send_signal(signal.SIGKILL)
    doomed.wait(timeout_s=30)

    def both_recorded():
        r = ctl("--daemon", a.address, "jobs", "--json")
        jobs = {j["name"]: j for j in json.loads(r.stdout)["jobs"]} if r.stdout else {}
        return "solo-ok" in jobs and "solo-doomed" in jobs and jobs
    jobs = wait_until(both_recorded, 10, "both single-host jobs in `jobs`")
    ok, failed = jobs["solo-ok"], jobs["solo-doomed"]
    assert ok["state"] == "ended" and ok["failure"] == "", ok
    assert ok["hosts"] == ["host-a"] and ok["size"] == 2 and ok["job_id"] == "0", ok
    assert int(ok["collectives_completed"]) > 0 and ok["duration_s"] > 0, ok
    assert failed["state"] == "failed", failed
    assert f"rank 1 (pid {victim.pid}) on host host-a" in failed["failure"], failed
    table = ctl("--daemon", a.address, "jobs")
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
    assert " ended " in rows["solo-ok"] and " ago " in rows["solo-ok"], table.stdout
    assert " failed " in rows["solo-doomed"] and f"(pid {victim.pid})" in rows["solo-doomed"]
    # `status` keeps showing them too, and the daemon still serves the name again.
    assert {j["name"] for j in status_json(a.address)["jobs"]} >= {"solo-ok", "solo-doomed"}
    for rc, out in Workers(a.socket, "solo-ok", 2, "many").wait(timeout_s=120):
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)
