"""systemd integration: READY=1 once serving, WATCHDOG=1 pings when WATCHDOG_USEC is set,
STOPPING=1 on SIGTERM, exit 0 — observed on a NOTIFY_SOCKET this test listens on."""
import os
import signal
import socket
import tempfile
import time

from harness import Daemon


def recv_until(sock, needle, timeout_s):
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            break
        seen.append(msg)
        if needle in msg.split("\n"):
            return seen
    raise AssertionError(f"never received {needle!r}; got {seen!r}")


def test_ready_watchdog_stopping():
    workdir = tempfile.mkdtemp(prefix="ard-sd.", dir="/tmp")
    path = os.path.join(workdir, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="200000")
    d = Daemon(workdir, "host-n", env=env)
    try:
        d.start(wait=False)
        msgs = recv_until(sock, "READY=1", 15)
        # READY comes only once serving: the port file is already in place.
        assert os.path.exists(d.port_file), msgs
        d.wait_serving()
        recv_until(sock, "WATCHDOG=1", 5)
        d.signal(signal.SIGTERM)
        recv_until(sock, "STOPPING=1", 10)
        assert d.wait_exit() == 0, d.read_log()
    finally:
        d.kill()
        sock.close()
