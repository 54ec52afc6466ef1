"""Hostile peers on the data plane (issue 27): strangers that reach a daemon's data port and know
(or guess: ids are consecutive) the next job's id. Two daemons; h-a (host 0 of every job) dials
h-b (host 1), so the strangers dial h-b claiming to be host 0. A handshake of a real job is
recorded off the loopback interface (raw socket: root only) to be replayed."""
import re
import secrets
import socket
import struct

import pytest

from fault_util import data_port, fd_count, make_cluster, run_job, wait_until
from loopback_capture import LoopbackCapture, can_capture

NAMES = ["h-a", "h-b"]
MAGIC, VERSION = 0x54445241, 4  # handshake.h kDataMagic, kDataVersion
HELLO = struct.Struct("<IIQQII16s")  # dataplane/tcp/handshake.h DataHello
PROOF_BYTES, NONCE_BYTES = 32, 16
HANDSHAKE_TIMEOUT_S = 10  # DataListenerOptions.handshake_timeout


def job_ids(daemon):
    return [int(x) for x in re.findall(r"tcp mesh connected job=(\d+)", daemon.read_log())]


def rejections(daemon, reason):
    return daemon.read_log().count(f"rejected reason={reason}")


def dial(port, data=b"", wait_nonce=False):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    if data:
        s.sendall(data)
    if wait_nonce:  # the listener answers a valid hello with its nonce, then parks on the proof
        nonce = b""
        while len(nonce) < NONCE_BYTES:
            chunk = s.recv(NONCE_BYTES - len(nonce))
            assert chunk, "the listener closed a valid hello"
            nonce += chunk
    return s


def closed_by_peer(s, timeout_s):
    s.settimeout(timeout_s)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.fixture(scope="module")
def cluster():
    c = make_cluster(NAMES)
    yield c
    c.close()


def test_strangers_cannot_take_a_hosts_place(cluster):
    """Promise: connections to h-b's data port for the next job's id, parked before the real
    host 0 dials, are each refused and closed with a named reason in h-b's log: a hello with the
    right job id and no secret (bad_proof), a real handshake of the previous job replayed with the
    next job's id (bad_proof; needs root to record it), random bytes (bad_hello), a dialer that
    sends 5 bytes and stops (handshake_timeout, within 10 s + slack). The job runs with correct
    results on every rank as if they were not there, the daemons keep serving (a second job
    runs), and h-b's open file descriptors come back to their count before the strangers."""
    a, b = cluster.daemons["h-a"], cluster.daemons["h-b"]
    port = data_port(b)
    sockets = [a.socket, b.socket]
    fds_before = fd_count(b)  # idle
    sniffer = LoopbackCapture(port) if can_capture() else None
    try:
        run_job(sockets, "warmup")
    finally:
        if sniffer:
            sniffer.close()
    previous = max(job_ids(b))
    # A job's descriptors close shortly after its ranks exit: back to the idle count.
    wait_until(lambda: fd_count(b) == fds_before, 15, "h-b's fd count back after a normal job")
    next_job = previous + 1  # ids are consecutive: what an attacker would guess

    strangers = []
    no_secret = HELLO.pack(MAGIC, VERSION, next_job, 1, 0, 1, secrets.token_bytes(16))
    strangers.append(dial(port, no_secret, wait_nonce=True))
    strangers[-1].sendall(secrets.token_bytes(PROOF_BYTES))
    expected_bad_proof = 1
    if sniffer:
        recorded = sniffer.first_dialed()[:HELLO.size + PROOF_BYTES]
        assert len(recorded) == HELLO.size + PROOF_BYTES, "no handshake recorded on lo"
        fields = list(HELLO.unpack(recorded[:HELLO.size]))
        assert fields[2] == previous, fields
        fields[2] = next_job
        strangers.append(dial(port, HELLO.pack(*fields), wait_nonce=True))
        strangers[-1].sendall(recorded[HELLO.size:])
        expected_bad_proof += 1
    garbage = dial(port, secrets.token_bytes(4096))
    slow = dial(port, no_secret[:5])

    run_job(sockets, "victim")
    assert max(job_ids(b)) == next_job, "the guessed id was not the job's: " + b.read_log()
    wait_until(lambda: rejections(b, "bad_proof") >= expected_bad_proof, 10,
               "h-b to refuse the parked strangers:\n" + b.read_log())
    for s in strangers:
        assert closed_by_peer(s, 10)
    assert closed_by_peer(garbage, 10)
    assert rejections(b, "bad_hello") == 1, b.read_log()
    assert closed_by_peer(slow, HANDSHAKE_TIMEOUT_S + 5)
    assert rejections(b, "handshake_timeout") == 1, b.read_log()
    assert "from 127.0.0.1:" in b.read_log()  # the remote address is named
    for s in strangers + [garbage, slow]:
        s.close()
    run_job(sockets, "after-strangers")
    wait_until(lambda: fd_count(b) == fds_before, 15,
               f"h-b's fd count back to {fds_before} (now {fd_count(b)})")
    assert a.proc.poll() is None and b.proc.poll() is None
