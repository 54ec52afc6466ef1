"""Hostile local clients and the daemon's limits (issue 7, items 2 and 4): other jobs and other Unix
users, silent clients, a thousand clients at once, clients that fill their arena, pile up pending
tensors or never read their completions, and the configurable caps (DaemonConfig fields 30-39).
Each case checks the promise stated in its docstring; /work/notes/reliability_local.md lists them.
Tests run as root; "another user" is `nobody` in a forked child (os.setuid)."""
import os
import resource
import socket
import time

import pytest

from harness import Cluster, Workers, lines_with, wait_until
from local_wire import (COMPLETE, ERROR, RELEASE, RESULT_SEGMENT, WELCOME,
                        RawClient, add_segment, complete_fields, error_text, frame, hello,
                        sealed_memfd, submit)

NOBODY = 65534
USERS_GID = 100  # group "users" in Debian's base-passwd
PERMISSION_DENIED, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED = 7, 8, 4


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    for d in c.daemons.values():
        assert d.proc.poll() is None, f"daemon {d.name} died:\n" + d.read_log()
    c.close()


def open_fds(daemon):
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def next_frame(client, skip=(RESULT_SEGMENT,)):
    """The next frame that is not one of `skip` (RESULT_SEGMENT precedes some COMPLETEs)."""
    while True:
        got = client.recv()
        if got is None or got[0] not in skip:
            return got


def register(path, job, size=1, segment=1 << 20):
    c = RawClient(path)
    fd = sealed_memfd(segment)
    c.send(hello(job, size=size, segment=segment), [fd])
    os.close(fd)
    return c


def as_user(fn, uid=NOBODY, gid=NOBODY, groups=()):
    """Runs fn() in a forked child with the given credentials; returns the string it returns."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another user")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            out = fn()
        except BaseException as e:  # report everything to the parent
            out = f"EXCEPTION {type(e).__name__}: {e}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


def hello_outcome(path, job):
    """In the child: connect, register, describe the daemon's first answer."""
    def run():
        c = RawClient(path)
        c.sock.settimeout(1)
        try:  # a refused peer gets its ERROR unprompted, right after accept
            got = c.recv()
        except socket.timeout:
            got = None
            c.sock.settimeout(10)
            fd = sealed_memfd(1 << 20)
            c.send(hello(job, size=1), [fd])
            os.close(fd)
            got = c.recv()
        if got is None:
            return "EOF"
        msg_type, _, payload = got
        if msg_type == ERROR:
            code, text = error_text(payload)
            return f"ERROR {code} {text}"
        return "WELCOME" if msg_type == WELCOME else f"TYPE {msg_type}"
    return run


def open_to_everyone(daemon):
    """Lets other uids reach the socket file, so the daemon's own peer policy is what is tested."""
    os.chmod(os.path.dirname(daemon.socket), 0o755)
    os.chmod(daemon.socket, 0o666)


def test_other_job_cannot_name_foreign_segments(cluster):
    """Arena segments are per process: another job's client naming a segment index only the owner
    registered, or bytes beyond its own segment, is refused; it cannot join a running job."""
    d = cluster.add("host-o")
    owner = register(d.socket, b"owner")
    assert owner.recv()[0] == WELCOME
    for index in (1, 2):
        fd = sealed_memfd(1 << 20)
        owner.send(add_segment(index, 1 << 20), [fd])
        os.close(fd)
    owner.send(submit(name=b"mine", request_id=1, segment=2))
    msg_type, rid, payload = next_frame(owner)
    assert (msg_type, rid) == (COMPLETE, 1)
    code, nbytes, text = complete_fields(payload)
    assert code == 0 and nbytes == 16, text
    owner.send(frame(RELEASE, request_id=1))

    intruder = register(d.socket, b"intruder")
    assert intruder.recv()[0] == WELCOME
    intruder.send(submit(name=b"theirs", request_id=5, segment=2))
    intruder.expect_complete_error(5, "input segment 2 does not exist (1 registered)")
    intruder.send(submit(name=b"beyond", request_id=6, offset=2 << 20, segment=0))
    intruder.expect_complete_error(6, "lies outside segment 0")
    late = register(d.socket, b"owner")
    late.expect_error("already running", code=6)
    for c in (owner, intruder, late):
        c.close()


def test_other_user_refused_by_default(cluster):
    """peer_policy same_user (default): a process of another uid is refused at accept with
    PERMISSION_DENIED naming its uid, and logged; root (the test itself) is accepted."""
    d = cluster.add("host-u")
    open_to_everyone(d)
    out = as_user(hello_outcome(d.socket, b"job-u"))
    assert out.startswith(f"ERROR {PERMISSION_DENIED} uid {NOBODY} may not use this daemon"), out
    assert "refused client" in d.read_log() and f"uid={NOBODY}" in d.read_log()
    root = register(d.socket, b"root-job")
    assert root.recv()[0] == WELCOME
    root.close()


def test_group_policy_and_jobs_bound_to_a_uid(cluster):
    """peer_policy group: members of allowed_group (supplementary or primary) are accepted, other
    users refused; a job belongs to its first process's uid, so another user cannot join it."""
    d = cluster.add("host-g", extra_flags=["--peer_policy=group", "--allowed_group=users"])
    open_to_everyone(d)
    member = as_user(hello_outcome(d.socket, b"job-g"), groups=[USERS_GID])
    assert member == "WELCOME", member
    primary = as_user(hello_outcome(d.socket, b"job-h"), gid=USERS_GID)
    assert primary == "WELCOME", primary
    stranger = as_user(hello_outcome(d.socket, b"job-s"))
    assert stranger.startswith(f"ERROR {PERMISSION_DENIED} uid {NOBODY} gid {NOBODY} may not"), \
        stranger
    # A root job still forming (1 of 2 ranks): the group member may not take its second rank.
    first = register(d.socket, b"shared", size=2)
    def join_shared():
        c = RawClient(d.socket)
        fd = sealed_memfd(1 << 20)
        c.send(hello(b"shared", size=2), [fd])
        os.close(fd)
        code, text = error_text(c.recv()[2])
        return f"{code} {text}"
    out = as_user(join_shared, groups=[USERS_GID])
    assert out == (f"{PERMISSION_DENIED} job shared belongs to uid 0; a process of uid {NOBODY} "
                   "cannot join it"), out
    first.close()


def test_silent_client_dropped_after_hello_timeout(cluster):
    """A client that connects and sends nothing blocks nobody and is dropped (ERROR
    DEADLINE_EXCEEDED, then hang-up) after hello_timeout_ms; a registered client waiting for its
    job to form is not."""
    d = cluster.add("host-s", extra_flags=["--hello_timeout_ms=500"])
    silent = RawClient(d.socket)
    waiting = register(d.socket, b"forming", size=2)
    good = Workers(d.socket, "meanwhile", 2, "many", seed=3)
    for rc, out in good.wait():
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)
    silent.expect_error("did not register (HELLO) within 500ms", code=DEADLINE_EXCEEDED)
    assert silent.recv() is None  # disconnected
    assert "dropping client" in d.read_log()
    waiting.sock.settimeout(1)
    with pytest.raises(socket.timeout):
        waiting.recv()
    silent.close()
    waiting.close()


def test_thousand_clients_at_once(cluster):
    """A thousand processes connecting at once (and forming one 1000-rank job): the daemon accepts
    them all (it raises its own open-file limit), then serves a normal job, and releases every
    descriptor when they leave."""
    n = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * n + 100:
        pytest.skip(f"hard open-file limit {hard} is too low for {n} client sockets here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * n)), hard))
    d = cluster.add("host-k")
    before = open_fds(d)
    clients = [RawClient(d.socket) for _ in range(n)]
    for c in clients:
        fd = sealed_memfd(64 << 10)
        c.send(hello(b"crowd", size=n, segment=64 << 10), [fd])
        os.close(fd)
    ranks = set()
    for c in clients:
        msg_type, _, payload = c.recv()
        assert msg_type == WELCOME, (msg_type, payload)
        ranks.add(int.from_bytes(payload[:4], "little", signed=True))
    assert ranks == set(range(n))
    assert open_fds(d) >= before + n
    for c in clients:
        c.close()
    wait_until(lambda: open_fds(d) <= before + 8, 20, "the daemon to close the clients' sockets")
    good = Workers(d.socket, "after-crowd", 2, "many", seed=4)
    for rc, out in good.wait():
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)


def test_max_clients(cluster):
    """max_clients: one client more is told RESOURCE_EXHAUSTED and disconnected (and logged; the
    client library reports that reason); once one leaves, a new client is served."""
    d = cluster.add("host-m", extra_flags=["--max_clients=4"])
    clients = [register(d.socket, b"four", size=4) for _ in range(4)]
    for c in clients:
        assert c.recv()[0] == WELCOME
    extra = RawClient(d.socket)
    extra.expect_error("too many local clients: this daemon serves at most 4 (max_clients)",
                       code=RESOURCE_EXHAUSTED)
    assert extra.recv() is None
    assert "refused client" in d.read_log()
    # The client library reports the daemon's reason, not a broken pipe.
    real = Workers(d.socket, "fifth", 1, "matrix")
    [(rc, out)] = real.wait()
    assert rc == 3 and lines_with(out, "INIT_ERROR RESOURCE_EXHAUSTED too many local clients"), out
    for c in clients:
        c.close()
    wait_until(lambda: "job removed job=four" in d.read_log(), 10, "job four to end")
    again = register(d.socket, b"again")
    assert again.recv()[0] == WELCOME
    again.close()


def test_max_jobs(cluster):
    """max_jobs: a HELLO that would start one job too many is refused with RESOURCE_EXHAUSTED;
    the existing jobs still form."""
    d = cluster.add("host-j", extra_flags=["--max_jobs=2"])
    a = register(d.socket, b"job-a", size=2)
    b = register(d.socket, b"job-b", size=2)
    c = register(d.socket, b"job-c", size=2)
    c.expect_error("cannot start job job-c: this daemon already has 2 jobs (max_jobs 2)",
                   code=RESOURCE_EXHAUSTED)
    a2 = register(d.socket, b"job-a", size=2)
    assert a.recv()[0] == WELCOME and a2.recv()[0] == WELCOME
    for x in (a, b, c, a2):
        x.close()


def test_arena_full(cluster):
    """A client growing its input arena past max_input_arena_bytes gets RESOURCE_EXHAUSTED for
    each refused segment; the daemon closes the refused descriptors (no growth) and the segments
    it accepted keep working."""
    d = cluster.add("host-a", extra_flags=[f"--max_input_arena_bytes={4 << 20}"])
    c = register(d.socket, b"greedy")
    assert c.recv()[0] == WELCOME
    for index in (1, 2, 3):
        fd = sealed_memfd(1 << 20)
        c.send(add_segment(index, 1 << 20), [fd])
        os.close(fd)
    fds = open_fds(d)
    for _ in range(200):
        fd = sealed_memfd(1 << 20)
        c.send(add_segment(4, 1 << 20), [fd])
        os.close(fd)
        c.expect_error("arena would exceed 4194304 bytes per process (has 4194304)",
                       code=RESOURCE_EXHAUSTED)
    assert open_fds(d) <= fds + 2
    c.send(submit(name=b"still", request_id=3, segment=3))
    msg_type, rid, payload = next_frame(c)
    assert (msg_type, rid) == (COMPLETE, 3) and complete_fields(payload)[0] == 0
    c.close()


def test_max_pending_tensors(cluster):
    """A rank submitting tensors its peers never submit fills its job's pending table up to
    max_pending_tensors; more new tensors fail with RESOURCE_EXHAUSTED (logged once), tensors
    already pending still complete, and room frees up as they do."""
    d = cluster.add("host-p", extra_flags=["--max_pending_tensors=50"])
    a = register(d.socket, b"pend", size=2)
    b = register(d.socket, b"pend", size=2)
    assert a.recv()[0] == WELCOME and b.recv()[0] == WELCOME
    for i in range(60):
        a.send(submit(name=b"t%d" % i, request_id=i + 1, offset=64 * i))
    for i in range(50, 60):
        a.expect_complete_error(i + 1, "already has 50 tensors submitted by some ranks but not all",
                                code=RESOURCE_EXHAUSTED)
    assert "max_pending_tensors" in d.read_log()
    b.send(submit(name=b"t0", request_id=1000))
    for c, rid in ((a, 1), (b, 1000)):
        msg_type, got, payload = next_frame(c)
        assert (msg_type, got) == (COMPLETE, rid) and complete_fields(payload)[0] == 0
    a.send(submit(name=b"t60", request_id=61, offset=64 * 60))  # room for one again: no reply
    a.sock.settimeout(0.5)
    with pytest.raises(socket.timeout):
        next_frame(a)
    a.close()
    b.close()


def test_client_that_never_reads_is_dropped(cluster):
    """A client that submits without reading its completions: the daemon queues at most
    max_client_outbox_bytes for it, then drops it with a log line; other jobs are unaffected.
    The limit is above everything the bystander can have queued (1000 tensors in flight, a
    completion frame of about 150 bytes each), so a bystander slowed by a loaded machine is never
    cut off."""
    d = cluster.add("host-r", extra_flags=["--max_client_outbox_bytes=1048576"])
    bystander = Workers(d.socket, "bystander", 2, "many", seed=8)
    flood = register(d.socket, b"flood")
    assert flood.recv()[0] == WELCOME
    sent = 0
    with pytest.raises(OSError):  # the daemon hangs up on it
        for i in range(200000):
            flood.send(submit(name=b"b%d" % i, request_id=i + 1, collective=6, shape=(),
                              nbytes=0))
            sent += 1
    assert sent > 100, sent
    log = wait_until(lambda: "stopped reading its completions" in d.read_log() and d.read_log(),
                     10, "the cut-off log line")
    assert any("dropping client" in line and "job=flood" in line for line in log.splitlines()), log
    for rc, out in bystander.wait():
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)
    flood.close()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_file_descriptors(cluster):
    """When accept() fails for lack of descriptors (EMFILE), the daemon logs it and pauses accepts
    instead of spinning on the readable listening socket; queued clients are served once
    descriptors free up."""
    d = cluster.add("host-f")
    limit = open_fds(d) + 10
    soft, hard = resource.prlimit(d.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(d.proc.pid, resource.RLIMIT_NOFILE, (limit, hard))  # soft limit only
    clients = [RawClient(d.socket) for _ in range(30)]  # 20 of them wait in the listen backlog
    wait_until(lambda: "pausing accepts" in d.read_log(), 10, "the EMFILE log line")
    start = cpu_seconds(d.proc.pid)
    time.sleep(1.0)
    used = cpu_seconds(d.proc.pid) - start
    assert used < 0.25, f"daemon used {used:.2f} s of CPU in 1 s while out of descriptors (spinning)"
    for c in clients[:25]:
        c.close()
    late = clients[-1]
    fd = sealed_memfd(1 << 20)
    late.send(hello(b"late"), [fd])
    os.close(fd)
    assert late.recv()[0] == WELCOME
    for c in clients[25:]:
        c.close()
    resource.prlimit(d.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    good = Workers(d.socket, "after-emfile", 2, "many", seed=6)
    for rc, out in good.wait():
        assert rc == 0 and lines_with(out, "DONE"), "\n".join(out)
