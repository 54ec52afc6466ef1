"""Encryption of the data plane (--data_plane_tls, TLS 1.3 with the daemons' gRPC certificates):
a job's bytes are captured off the loopback interface (AF_PACKET: needs CAP_NET_RAW) and
searched for its tensors' values. The same search on a plaintext cluster must find them, so the
check can fail."""
import json
import re
import shutil
import socket
import struct
import tempfile
import threading

import pytest

from fault_util import (HOST_TIMEOUT_MS, STALL_WARNING_MS, Procs, harness, make_pki, run_job,
                        tls_flags, wait_until)

if shutil.which("openssl") is None:
    pytest.skip("openssl is not installed", allow_module_level=True)

NAMES = ["h-a", "h-b"]
ELEMS = 64 * 1024  # float32 per rank and step: 256 KiB, several TCP segments
# What the ranks submit in the first step: rank r's tensor is ELEMS copies of float(r + 1)
# (worker_faults.cc "steps"). 64 copies in a row are the pattern looked for on the wire.
PATTERNS = {f"rank {r}": struct.pack("<f", r + 1.0) * 64 for r in range(len(NAMES))}


def can_capture():
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800)).close()
        return True
    except (PermissionError, OSError):
        return False


class Capture:
    """TCP payload to and from `port` on lo, per direction, while running."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.streams = {}  # (src port, dst port) -> bytes
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                frame = self.sock.recv(1 << 17)
            except socket.timeout:
                continue
            ip = frame[14:]
            if len(ip) < 20 or ip[9] != 6:  # TCP over IPv4 only
                continue
            tcp = ip[(ip[0] & 0xF) * 4:]
            src, dst = struct.unpack("!HH", tcp[:4])
            data = tcp[(tcp[12] >> 4) * 4:]
            if data and self.port in (src, dst):
                self.streams[(src, dst)] = self.streams.get((src, dst), b"") + data

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sock.close()

    def captured(self):
        return sum(len(b) for b in self.streams.values())

    def found(self, pattern):
        return any(pattern in b for b in self.streams.values())


def data_port(daemon):
    m = re.search(r"data listener started address=\S+ port=(\d+)", daemon.read_log())
    assert m, daemon.read_log()
    return int(m.group(1))


def status(pki, address):
    r = harness.ctl("--daemon", address, "--timeout_ms", "2000", "--tls_cert", f"{pki}/ctl.pem",
                    "--tls_key", f"{pki}/ctl.key", "--tls_ca", f"{pki}/ca.pem", "status", "--json")
    return json.loads(r.stdout) if r.returncode in (0, 3) else None


def hosts_up(pki, address):
    s = status(pki, address)
    return {h["name"] for h in (s or {}).get("hosts", []) if h["state"] == "UP"}


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="ard-pki.", dir="/tmp")
    make_pki(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_cluster(pki, data_plane_tls):
    """h-a and h-b over mutual TLS; data_plane_tls: one bool for both, or one per host."""
    per_host = data_plane_tls if isinstance(data_plane_tls, list) else [data_plane_tls] * 2
    c = harness.Cluster(heartbeat_ms=100, host_timeout_ms=HOST_TIMEOUT_MS)
    for name, on in zip(NAMES, per_host):
        flags = [f"--stall_warning_ms={STALL_WARNING_MS}", "--job_form_timeout_ms=8000",
                 f"--data_plane_tls={'true' if on else 'false'}"] + tls_flags(pki, name)
        c.add(name, extra_flags=flags)
    wait_until(lambda: hosts_up(pki, c.daemons["h-a"].address) == set(NAMES), 15,
               "h-a and h-b UP over TLS")
    return c


@pytest.mark.parametrize("encrypted", [True, False], ids=["tls", "plaintext"])
def test_capture_shows_tensor_bytes_only_without_tls(pki, encrypted):
    """Promise: with data_plane_tls on both daemons, a job's data connection on loopback carries
    none of its tensors' bytes in clear (64 float32 of a rank's value in a row are looked for in
    each direction of the capture), `allreducectl status` says "encrypted" for every host, and
    the job's results are right; with it off, the same capture finds both ranks' patterns and
    status says "authenticated"."""
    if not can_capture():
        pytest.skip("no AF_PACKET socket (needs CAP_NET_RAW): the capture cannot be taken")
    c = make_cluster(pki, encrypted)
    try:
        a, b = c.daemons["h-a"], c.daemons["h-b"]
        hosts = status(pki, a.address)["hosts"]
        expected = "encrypted" if encrypted else "authenticated"
        assert [h["data_plane_security"] for h in hosts] == [expected] * 2, hosts
        capture = Capture(data_port(b))  # h-a (host 0) dials h-b's data port
        try:
            run_job([a.socket, b.socket], "pattern", steps=2, elems=ELEMS)
        finally:
            capture.close()
        assert capture.captured() >= ELEMS * 4, f"captured only {capture.captured()} bytes"
        found = [who for who, pattern in PATTERNS.items() if capture.found(pattern)]
        print(f"captured {capture.captured()} bytes in {len(capture.streams)} directions; "
              f"patterns in clear: {found}")
        if encrypted:
            assert found == [], f"tensor bytes of {found} in clear on an encrypted data plane"
            assert "encryption=tls1.3" in a.read_log(), a.read_log()
        else:
            assert found == list(PATTERNS), f"the plaintext capture found only {found}"
    finally:
        c.close()


def test_hosts_with_different_data_plane_tls_fail_the_job_saying_so(pki):
    """Promise: a job across a daemon with data_plane_tls and one without fails on every rank
    with an error naming the setting (no garbage read as tensors), and both daemons keep
    serving: a job on one host still runs."""
    c = make_cluster(pki, [True, False])
    try:
        a, b = c.daemons["h-a"], c.daemons["h-b"]
        p = Procs([a.socket, b.socket], "mixed", 1, "steps", env={"ARD_STEPS": "1"})
        try:
            codes = p.wait(timeout_s=60)
        finally:
            p.kill()
        for i in codes:
            line = p.line(i, "ERROR step ") or ""
            assert "data_plane_tls" in line, p.dump(i)
        run_job([a.socket], "alone", steps=1)
        assert a.proc.poll() is None and b.proc.poll() is None
    finally:
        c.close()


def test_data_plane_tls_without_certificates_is_refused_at_startup():
    """Promise: --data_plane_tls without the three TLS files exits at startup naming them."""
    d = harness.Daemon(tempfile.mkdtemp(prefix="ard-it.", dir="/tmp"), "bare",
                       extra_flags=["--data_plane_tls=true"])
    d.start(wait=False)
    try:
        assert d.wait_exit(10) != 0
        assert "data_plane_tls needs tls_cert_file" in d.read_log()
    finally:
        d.kill()
        shutil.rmtree(d.workdir, ignore_errors=True)
