"""Three daemons on loopback form a cluster; SIGKILL, restart and SIGTERM change it as promised
(issue: cluster foundation). Every check goes through the real CLI."""
import json
import signal
import socket
import time

import pytest

from harness import Cluster, Daemon, Workers, ctl, host_states, status_json, wait_until

HEARTBEAT_MS = 100
HOST_TIMEOUT_MS = 1000
# Margin for DOWN detection beyond host_timeout_ms: the coordinator sweeps every
# min(heartbeat, timeout/4), and the CLI poll and process scheduling on 2 shared vCPUs add more.
MARGIN_S = 1.5


@pytest.fixture
def cluster():
    c = Cluster(heartbeat_ms=HEARTBEAT_MS, host_timeout_ms=HOST_TIMEOUT_MS)
    yield c
    c.close()


def all_up(address, names):
    hosts = host_states(address)
    return hosts is not None and all(n in hosts and hosts[n]["state"] == "UP" for n in names)


def state_of(address, name):
    hosts = host_states(address)
    return hosts and hosts.get(name)


def test_three_hosts_up_seen_from_every_daemon(cluster):
    a = cluster.add("host-a")
    b = cluster.add("host-b")
    c = cluster.add("host-c")
    names = ["host-a", "host-b", "host-c"]
    wait_until(lambda: all_up(a.address, names), 10, "all three hosts UP")
    for d in (a, b, c):
        status = status_json(d.address)
        assert status is not None, cluster.logs()
        hosts = {h["name"]: h for h in status["hosts"]}
        assert sorted(hosts) == names
        assert hosts["host-b"]["address"] == b.address
        assert hosts["host-c"]["address"] == c.address
        assert all(h["state"] == "UP" for h in hosts.values())
        assert hosts["host-a"]["coordinator"] is True
        assert status["coordinator"] == "host-a"
        assert status["jobs"] == []
        assert status["answered_by"] == d.name
        assert status["forwarded"] == (d is not a)
    table = ctl("--daemon", c.address, "status")
    assert table.returncode == 0, table.stderr
    for name in names:
        assert name in table.stdout
    assert "3 of 3 hosts UP" in table.stdout
    assert "Jobs:" in table.stdout


def test_sigkill_marks_down_within_timeout_and_restart_rejoins(cluster):
    a = cluster.add("host-a")
    b = cluster.add("host-b")
    cluster.add("host-c")
    wait_until(lambda: all_up(a.address, ["host-a", "host-b", "host-c"]), 10, "all UP")
    assert state_of(a.address, "host-b")["incarnation"] == 1

    killed_at = time.monotonic()
    b.proc.kill()
    b.proc.wait()
    down = wait_until(lambda: (s := state_of(a.address, "host-b")) and s["state"] == "DOWN" and s,
                      HOST_TIMEOUT_MS / 1000 + MARGIN_S + 5, "host-b DOWN")
    elapsed = time.monotonic() - killed_at
    assert elapsed <= HOST_TIMEOUT_MS / 1000 + MARGIN_S, f"DOWN after {elapsed:.2f}s"
    assert "missed heartbeats" in down["down_reason"]
    assert state_of(a.address, "host-c")["state"] == "UP"

    # A follower's view (forwarded) says the same.
    assert state_of(cluster.daemons["host-c"].address, "host-b")["state"] == "DOWN"

    b.start()  # same host name, new process
    up = wait_until(lambda: (s := state_of(a.address, "host-b")) and s["state"] == "UP" and s,
                    10, "host-b UP again")
    assert up["incarnation"] == 2
    assert up["address"] == b.address


def test_sigterm_exits_zero_and_peers_mark_it_down(cluster):
    a = cluster.add("host-a")
    cluster.add("host-b")
    c = cluster.add("host-c")
    wait_until(lambda: all_up(a.address, ["host-a", "host-b", "host-c"]), 10, "all UP")
    c.signal(signal.SIGTERM)
    assert c.wait_exit() == 0, c.read_log()
    down = state_of(a.address, "host-c")
    # Leave is sent before exit, so DOWN is immediate, with the reason.
    assert down["state"] == "DOWN", down
    assert down["down_reason"] == "left the cluster"
    assert state_of(a.address, "host-b")["state"] == "UP"
    assert "shutting down" in c.read_log()


def test_coordinator_sigterm_exits_zero_and_followers_report_it(cluster):
    a = cluster.add("host-a")
    b = cluster.add("host-b")
    wait_until(lambda: all_up(a.address, ["host-a", "host-b"]), 10, "all UP")
    a.signal(signal.SIGTERM)
    assert a.wait_exit() == 0, a.read_log()
    r = ctl("--daemon", b.address, "--timeout_ms", "3000", "status")
    assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert "cannot reach the coordinator" in r.stderr
    # The follower keeps running and rejoins when a coordinator comes back on the same port.
    assert b.proc.poll() is None
    wait_until(lambda: "coordinator unreachable" in b.read_log(), 5, "follower to notice")


def test_follower_started_before_coordinator_retries_then_joins(cluster):
    # Reserve a port for the coordinator by starting it once, then stopping it.
    a = cluster.add("host-a")
    port = a.port
    a.signal(signal.SIGTERM)
    assert a.wait_exit() == 0
    b = cluster.add("host-b")  # its coordinator (host-a's old address) is down
    wait_until(lambda: "join failed, retrying" in b.read_log(), 5, "a join retry log line")
    a.flags = [f if not f.startswith("--cluster_address") else f"--cluster_address=127.0.0.1:{port}"
               for f in a.flags]
    a.start()
    wait_until(lambda: all_up(a.address, ["host-a", "host-b"]), 10, "host-b joins late")
    assert b.proc.poll() is None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def duplicate(cluster, name, label):
    """Starts a second daemon claiming host name `name`; returns it once it has exited."""
    d = Daemon(cluster.workdir, label, coordinator=cluster.daemons["host-a"].address,
               heartbeat_ms=HEARTBEAT_MS, host_timeout_ms=HOST_TIMEOUT_MS,
               extra_flags=[f"--host_name={name}"])
    cluster.daemons[label] = d
    d.start(wait=False)
    d.wait_exit()
    return d


def test_second_daemon_with_a_members_name_is_refused(cluster):
    """The live holder keeps the name; the newcomer logs an error and exits 3, the coordinator
    warns naming both daemons, the holder logs who asked for its name."""
    a = cluster.add("host-a")
    b = cluster.add("host-b")
    wait_until(lambda: all_up(a.address, ["host-a", "host-b"]), 10, "all UP")
    b2 = duplicate(cluster, "host-b", "host-b2")
    assert b2.proc.returncode == 3, b2.read_log()
    log = b2.read_log()
    refusal = f"host name 'host-b' is held by the live member at {b.address} (instance "
    assert "[error] host name refused by the coordinator, not joining" in log, log
    last = log.strip().splitlines()[-1]
    assert last.startswith("allreduced: " + refusal), log
    assert "; refused the daemon at 127.0.0.1:" in last, last
    assert last.endswith("give each daemon its own host_name"), last
    warn = [line for line in a.read_log().splitlines() if "join refused host=host-b" in line]
    assert warn and "[warning]" in warn[0] and refusal in warn[0], a.read_log()
    assert "another daemon asked for this host name host=host-b" in b.read_log()
    # The holder is untouched (a takeover would have shown as incarnation 2 at once) and its
    # heartbeats are still accepted.
    held = state_of(a.address, "host-b")
    assert held["state"] == "UP" and held["incarnation"] == 1 and held["address"] == b.address
    assert "stopped heartbeating" not in b.read_log()
    wait_until(lambda: state_of(a.address, "host-b")["last_heartbeat_age_s"] < 0.5, 5,
               "a recent heartbeat from host-b")


def test_daemon_claiming_the_coordinators_name_is_refused(cluster):
    a = cluster.add("host-a")
    impostor = duplicate(cluster, "host-a", "impostor")
    assert impostor.proc.returncode == 3, impostor.read_log()
    assert impostor.read_log().strip().splitlines()[-1].startswith(
        f"allreduced: host name 'host-a' is held by the live coordinator at {a.address}")
    assert sorted(host_states(a.address)) == ["host-a"]


def test_crashed_daemon_restarted_rejoins_before_its_host_timeout():
    """A SIGKILLed daemon restarted at once (same name, new instance) takes its name back without
    waiting for the 20 s host timeout: on the same address (the new process answers there) and
    on another (nothing answers at the old one)."""
    c = Cluster(heartbeat_ms=HEARTBEAT_MS, host_timeout_ms=20000)
    try:
        a = c.add("host-a")
        b = c.add("host-b")
        wait_until(lambda: all_up(a.address, ["host-a", "host-b"]), 10, "all UP")
        for restart, port in enumerate([b.port, 0], start=2):
            b.proc.kill()
            b.proc.wait()
            b.flags = [f"--cluster_address=127.0.0.1:{port}" if f.startswith("--cluster_address")
                       else f for f in b.flags]
            restarted = time.monotonic()
            b.start()
            up = wait_until(lambda: (s := state_of(a.address, "host-b")) and
                            s["incarnation"] == restart and s, 10, f"incarnation {restart}")
            assert time.monotonic() - restarted < 5, "waited for the host timeout"
            assert up["state"] == "UP" and up["address"] == b.address
            assert b.proc.poll() is None
        assert "host name handed over host=host-b" in a.read_log()
    finally:
        c.close()


def test_status_from_a_follower_whose_coordinator_is_not_running(cluster):
    """The follower answers with its own view (role, coordinator, join attempts, last error, local
    jobs) and says the cluster view is unavailable and why; exit 4, not 'cannot reach daemon'."""
    coordinator = f"127.0.0.1:{free_port()}"  # nothing listens there
    b = Daemon(cluster.workdir, "host-b", coordinator=coordinator)
    cluster.daemons["host-b"] = b
    b.start()
    wait_until(lambda: "join failed, retrying" in b.read_log(), 10, "a failed join")
    # One rank of a two-rank job: it stays forming on the follower.
    worker = Workers(b.socket, "train", 1, "matrix",
                     env_for_rank=lambda r: {"ALLREDUCED_RANK": "0", "ALLREDUCED_SIZE": "2"})
    try:
        def local_view():
            r = ctl("--daemon", b.address, "--timeout_ms", "3000", "status", "--json")
            if r.returncode != 4:
                return None
            view = json.loads(r.stdout)
            return view if view["local"]["jobs"] else None
        view = wait_until(local_view, 10, "the follower's local view with its job")
        assert view["answered_by"] == "host-b"
        assert view["forwarded"] is False
        assert view["hosts"] == [] and view["coordinator"] == ""
        assert view["cluster_view_error"].startswith(
            f"host host-b cannot reach the coordinator at {coordinator}: "), view
        local = view["local"]
        assert local["host"] == "host-b" and local["address"] == b.address
        assert local["role"] == "follower"
        assert local["coordinator_address"] == coordinator
        assert local["membership"] == "joining"
        assert local["join_attempts"] >= 1
        assert local["incarnation"] == 0 and local["last_contact_age_s"] == -1
        assert local["last_error"].startswith("UNAVAILABLE"), local
        assert [j["name"] for j in local["jobs"]] == ["train"]

        r = ctl("--daemon", b.address, "--timeout_ms", "3000", "status")
        assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("allreducectl: cluster view unavailable (host-b's local view "
                                   f"shown): host host-b cannot reach the coordinator at "
                                   f"{coordinator}: "), r.stderr
        assert "cannot reach daemon" not in r.stderr
        out = r.stdout
        assert out.startswith("Cluster view unavailable: host host-b cannot reach the coordinator")
        assert f"Local view of host host-b ({b.address}, follower):" in out, out
        assert f"  coordinator   {coordinator}\n" in out, out
        assert "  membership    joining (not a cluster member; " in out, out
        assert "  last contact  never\n" in out, out
        assert "  last error    UNAVAILABLE" in out, out
        assert "Jobs on host host-b:" in out and "train" in out, out
    finally:
        worker.kill()


def test_ctl_reports_unreachable_daemon_in_one_line():
    r = ctl("--daemon", "127.0.0.1:1", "--timeout_ms", "1000", "status")
    assert r.returncode == 1
    assert r.stderr.strip().startswith("allreducectl: cannot reach daemon at 127.0.0.1:1")
    assert r.stderr.count("\n") == 1, r.stderr
    r = ctl("--daemon", "127.0.0.1:1", "--timeout_ms", "1000", "status", "--json")
    assert r.returncode == 1 and r.stdout == ""


def test_ctl_usage_errors():
    assert ctl().returncode == 2
    assert ctl("frobnicate").returncode == 2
    assert ctl("status", "--bogus").returncode == 2
    assert ctl("--help").returncode == 0
