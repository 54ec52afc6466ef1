"""Encryption of the data plane (--data_plane_tls, TLS 1.3 with the daemons' gRPC certificates):
a job's bytes are captured off the loopback interface (AF_PACKET: needs CAP_NET_RAW) and
searched for its tensors' values. The same search on a plaintext cluster must find them, so the
check can fail."""
import shutil
import struct
import tempfile

import pytest

from fault_util import Procs, data_port, harness, run_job
from loopback_capture import LoopbackCapture, can_capture
from tls_util import pki  # noqa: F401  (a fixture)
from tls_util import tls_cluster, tls_status

if shutil.which("openssl") is None:
    pytest.skip("openssl is not installed", allow_module_level=True)

NAMES = ["h-a", "h-b"]
ELEMS = 64 * 1024  # float32 per rank and step: 256 KiB, several TCP segments
# What the ranks submit in the first step: rank r's tensor is ELEMS copies of float(r + 1)
# (worker_faults.cc "steps"). 64 copies in a row are the pattern looked for on the wire.
PATTERNS = {f"rank {r}": struct.pack("<f", r + 1.0) * 64 for r in range(len(NAMES))}


def make_cluster(pki, data_plane_tls):
    """h-a and h-b over mutual TLS; data_plane_tls: one bool for both, or one per host."""
    per_host = data_plane_tls if isinstance(data_plane_tls, list) else [data_plane_tls] * 2
    return tls_cluster(pki, {name: [f"--data_plane_tls={'true' if on else 'false'}"]
                             for name, on in zip(NAMES, per_host)})


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
        hosts = tls_status(pki, a.address)["hosts"]
        expected = "encrypted" if encrypted else "authenticated"
        assert [h["data_plane_security"] for h in hosts] == [expected] * 2, hosts
        capture = LoopbackCapture(data_port(b))  # h-a (host 0) dials h-b's data port
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
