"""`allreducectl bench` against a real daemon: every collective through the real client library
with --check, the JSON report, and failures that end quickly with one line on stderr. No timing
assertions: the machines are shared and noisy."""
import json
import os
import signal
import time

import pytest

from harness import Cluster, ctl


@pytest.fixture(scope="module")
def daemon():
    cluster = Cluster()
    try:
        yield cluster.add("a")
    finally:
        cluster.close()


def bench(*args, timeout_s=120):
    return ctl("bench", *args, timeout_s=timeout_s)


def bench_json(daemon, *args):
    r = bench("--sockets", daemon.socket, "--np", "2", "--check", "--json", *args)
    assert r.returncode == 0, (r.returncode, r.stderr, daemon.read_log())
    return json.loads(r.stdout)


def assert_rows_ok(report, sizes):
    assert [row["size"] for row in report["rows"]] == sizes
    for row in report["rows"]:
        assert row["wrong"] == 0, row
        assert row["time_us"] > 0, row
        assert row["busbw"] > 0, row
        assert row["algbw"] > 0, row


def assert_one_line_error(r, needle):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("allreducectl: bench: "), lines[0]
    assert needle in lines[0], lines[0]


def test_allreduce_sizes_4k_to_1m(daemon):
    report = bench_json(daemon, "--sizes", "4K:1M")
    assert report["op"] == "allreduce"
    assert report["dtype"] == "float32"
    assert report["redop"] == "sum"
    assert report["ranks"] == 2
    assert_rows_ok(report, [4096 << i for i in range(9)])
    assert all(row["count"] == row["size"] // 4 for row in report["rows"])


@pytest.mark.parametrize("op", ["allgather", "broadcast", "alltoall", "reducescatter"])
def test_other_collectives(daemon, op):
    report = bench_json(daemon, "--op", op, "--sizes", "4K,256K", "--iters", "5")
    assert report["op"] == op
    assert_rows_ok(report, [4096, 262144])
    if op in ("allgather", "reducescatter", "alltoall"):
        assert all(row["count"] == row["size"] // 4 // 2 for row in report["rows"])


@pytest.mark.parametrize("dtype,reduce", [("float16", "average"), ("bfloat16", "max"),
                                          ("int8", "product"), ("int64", "min")])
def test_reduction_dtypes(daemon, dtype, reduce):
    report = bench_json(daemon, "--dtype", dtype, "--reduce", reduce, "--sizes", "1K,64K",
                        "--np", "3", "--iters", "3")
    assert report["ranks"] == 3
    assert report["dtype"] == dtype and report["redop"] == reduce
    assert len(report["rows"]) == 2 and all(row["wrong"] == 0 for row in report["rows"])


def test_table_output(daemon):
    r = bench("--sockets", daemon.socket, "--np", "2", "--sizes", "4:16", "--check")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(l.startswith("#") and "busbw #wrong" in l for l in lines), r.stdout
    rows = [l.split() for l in lines if not l.startswith("#")]
    assert [row[0] for row in rows] == ["4", "8", "16"]
    assert all(row[2:4] == ["float32", "sum"] and row[-1] == "0" for row in rows)
    assert "# Out of bounds values : 0 OK" in r.stdout


def test_no_daemon_fails_fast(daemon):
    missing = os.path.join(daemon.workdir, "nobody.sock")
    start = time.monotonic()
    r = bench("--sockets", missing, "--np", "2", "--sizes", "4K", "--json", timeout_s=30)
    assert time.monotonic() - start < 10
    assert_one_line_error(r, "UNAVAILABLE")
    assert missing in r.stderr
    assert r.stdout == ""


def test_same_socket_twice_is_a_clear_error(daemon):
    # Two "hosts" that are the same daemon: local ranks collide; one line, no hang.
    r = bench("--sockets", f"{daemon.socket},{daemon.socket}", "--np", "1", "--sizes", "4K",
              timeout_s=30)
    assert_one_line_error(r, "registered twice")


@pytest.mark.parametrize("op", ["allreduce", "allgather", "broadcast", "alltoall",
                                "reducescatter"])
def test_job_across_two_daemons(op):
    cluster = Cluster()
    try:
        a = cluster.add("host-a")
        b = cluster.add("host-b")
        r = bench("--sockets", f"{a.socket},{b.socket}", "--np", "2", "--op", op, "--sizes",
                  "4K:256K", "--check", "--json", timeout_s=120)
        assert r.returncode == 0, (r.stderr, a.read_log(), b.read_log())
        report = json.loads(r.stdout)
        assert report["ranks"] == 4
        assert report["rows"] and all(row["wrong"] == 0 for row in report["rows"])
    finally:
        cluster.close()


def test_unresponsive_daemon_times_out():
    # A stopped daemon accepts connections (the kernel queues them) but never answers: the run
    # must end at --timeout_ms with one line, not hang.
    cluster = Cluster()
    try:
        stopped = cluster.add("stopped")
        stopped.signal(signal.SIGSTOP)
        start = time.monotonic()
        r = bench("--sockets", stopped.socket, "--np", "2", "--sizes", "4K", "--timeout_ms",
                  "1000", timeout_s=30)
        assert time.monotonic() - start < 10
        assert_one_line_error(r, "DEADLINE_EXCEEDED")
    finally:
        cluster.close()  # sends SIGCONT before SIGKILL


def test_usage_errors(daemon):
    r = bench("--sockets", daemon.socket, "--sizes", "4X")
    assert r.returncode == 2
    assert "bad size '4X'" in r.stderr
    r = bench("--sockets", daemon.socket, "--op", "gather")
    assert r.returncode == 2
    r = bench("--help")
    assert r.returncode == 0 and "busbw" in r.stdout
