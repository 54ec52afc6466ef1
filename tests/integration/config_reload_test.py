"""SIGHUP re-reads the --config file: log_level applies at once, other changed fields are named as
needing a restart, a broken file keeps the running settings; the daemon keeps serving throughout."""
import os
import signal
import socket

import pytest

from harness import Cluster, ctl, wait_until


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def touch_local_socket(daemon):
    """Connects to the daemon's local socket and hangs up: the daemon logs both at debug."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(daemon.socket)
    s.close()


def reloads(daemon):
    return [line for line in daemon.read_log().splitlines() if "SIGHUP" in line]


def test_sighup_applies_log_level_and_keeps_serving(cluster):
    conf = os.path.join(cluster.workdir, "a.conf")
    write(conf, 'log_level: "info"\n')
    a = cluster.add("host-a", extra_flags=[f"--config={conf}"])
    touch_local_socket(a)
    wait_until(lambda: ctl("--daemon", a.address, "status").returncode == 0, 10, "status")
    assert "[debug]" not in a.read_log()

    write(conf, 'log_level: "debug"\nstall_warning_ms: 30000\n')
    a.signal(signal.SIGHUP)
    line = wait_until(lambda: reloads(a), 10, "the reload line")[0]
    assert "[info]" in line, line
    assert f"config reloaded file={conf} applied=[log_level \"info\" -> \"debug\"]" in line, line
    assert "needs_restart=[stall_warning_ms 60000 -> 30000]" in line, line
    assert a.proc.poll() is None
    r = ctl("--daemon", a.address, "status")
    assert r.returncode == 0, r.stderr
    touch_local_socket(a)
    wait_until(lambda: "[local] [debug] client connected" in a.read_log(), 10, "a debug line")

    # A file that no longer parses: an error line, and the daemon keeps its settings (debug).
    write(conf, 'log_level: "info"\nlog_level: "warn"\n')
    a.signal(signal.SIGHUP)
    line = wait_until(lambda: len(reloads(a)) > 1 and reloads(a)[1], 10, "the failed reload")
    assert "[error]" in line and "config reload failed, keeping the running settings" in line
    assert f"{conf}:2:" in line, line
    assert a.proc.poll() is None
    before = a.read_log().count("client connected")
    touch_local_socket(a)
    wait_until(lambda: a.read_log().count("client connected") > before, 10, "still at debug")
    assert ctl("--daemon", a.address, "status").returncode == 0

    # Flags on the command line win over the file, as at startup; SIGTERM still stops it cleanly.
    write(conf, 'log_level: "warn"\nhost_name: "renamed"\n')
    a.signal(signal.SIGHUP)
    line = wait_until(lambda: len(reloads(a)) > 2 and reloads(a)[2], 10, "the third reload")
    assert "applied=[log_level \"debug\" -> \"warn\"]" in line, line
    assert "host_name" not in line, line  # --host_name=host-a is a flag
    a.signal(signal.SIGTERM)
    assert a.wait_exit() == 0, a.read_log()


def test_sighup_without_config_file_changes_nothing(cluster):
    a = cluster.add("host-a")
    a.signal(signal.SIGHUP)
    line = wait_until(lambda: reloads(a), 10, "the reload line")[0]
    assert "config reloaded file=none nothing changed" in line, line
    assert ctl("--daemon", a.address, "status").returncode == 0
    assert a.proc.poll() is None
