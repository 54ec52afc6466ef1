"""The launcher's elastic mode: SlotTable's bookkeeping and blacklist, the discovery script's
parsing (pure), and `python -m allreduced.launch --min-np 2 --max-np 4 -np 4` over 2 real daemons
x 2 slots with real TensorFlow workers (elastic_worker.py): a worker dies, the job shrinks to 3,
the launcher starts a replacement in the freed slot, the job grows back to 4 and finishes; and
over the cluster view: a daemon joins mid-run, the launcher starts workers there, the job grows."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster, binary, status_json  # noqa: E402
from allreduced.launch import elastic  # noqa: E402
from allreduced.launch.hosts import Host, HostError  # noqa: E402

PACKAGE_DIR = os.path.join(HERE, "..", "..", "python")
WORKER = os.path.join(HERE, "elastic_worker.py")


def test_discovery_lines_parse_in_order():
    hosts = elastic.parse_discovery("a:2\n\n  b.example:4 \n")
    assert [(h.name, h.slots, h.socket) for h in hosts] == [("a", 2, None), ("b.example", 4, None)]


@pytest.mark.parametrize("text", ["a", "a:0", "a:x", ":2", "a b:2", "a:2\na:3"])
def test_bad_discovery_lines_are_a_clear_error(text):
    with pytest.raises(HostError) as e:
        elastic.parse_discovery(text, "script s")
    assert "script s" in str(e.value) or "named twice" in str(e.value)


def test_a_failing_discovery_script_is_an_error(tmp_path):
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\necho oops >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(HostError, match="failed: oops"):
        elastic.run_discovery_script(str(script))
    script.write_text("#!/bin/sh\necho h1:2\necho h2\n")
    with pytest.raises(HostError, match="line 2: expected 'host:slots'"):
        elastic.run_discovery_script(str(script))


def test_slots_free_taken_and_released():
    table = elastic.SlotTable()
    table.update([Host("a", 2, "/a", True), Host("b", 1, "/b", True)])
    assert [(h.name, i) for h, i in table.free(0)] == [("a", 0), ("a", 1), ("b", 0)]
    table.take("a")
    table.take("b")
    assert [(h.name, i) for h, i in table.free(0)] == [("a", 1)]
    assert not table.release("b", True, 0)
    assert [(h.name, i) for h, i in table.free(0)] == [("a", 1), ("b", 0)]
    table.update([Host("a", 2, "/a", True)])  # b is gone: no new worker there
    assert [(h.name, i) for h, i in table.free(0)] == [("a", 1)]


def test_a_host_failing_three_times_in_the_window_is_blacklisted_for_the_cool_down():
    table = elastic.SlotTable(failure_limit=3, window_s=10, cool_down_s=100)
    table.update([Host("a", 1, "/a", True), Host("b", 1, "/b", True)])
    for now in (0, 20, 25):  # the first failure is out of the window by the third
        table.take("a")
        assert not table.release("a", True, now)
    table.take("a")
    assert table.release("a", True, 29)
    assert [h.name for h, _ in table.free(30)] == ["b"]
    assert [h.name for h, _ in table.free(128.9)] == ["b"]
    assert [h.name for h, _ in table.free(129.1)] == ["a", "b"]
    table.take("b")
    assert not table.release("b", False, 130)  # a success is no failure
    assert table.used == {"a": 0, "b": 0}


def watched_launch(cluster, args, env, stall_s=90, limit_s=300, on_line=None):
    """Runs `python -m allreduced.launch ARGS`; returns (exit code, stdout, stderr); on_line(line)
    sees each stdout line as it comes (from a reader thread). If it prints
    nothing for stall_s, or runs past limit_s, it is stopped (SIGTERM stops its workers) and the
    test fails at once with its output (each line with the time it came), every daemon's job
    status and the daemons' logs (also kept in the test's outputs)."""
    p = subprocess.Popen([sys.executable, "-m", "allreduced.launch", *args], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = {"out": [], "err": []}
    last = [time.monotonic()]

    def pump(stream, into):
        for line in stream:
            into.append((time.time(), line))
            last[0] = time.monotonic()
            if on_line is not None and into is lines["out"]:
                on_line(line)

    pumps = [threading.Thread(target=pump, args=(p.stdout, lines["out"])),
             threading.Thread(target=pump, args=(p.stderr, lines["err"]))]
    for t in pumps:
        t.start()
    started = time.monotonic()
    why = None
    while p.poll() is None and why is None:
        time.sleep(0.2)
        now = time.monotonic()
        if now - last[0] > stall_s:
            why = f"no output for {stall_s}s"
        elif now - started > limit_s:
            why = f"still running after {limit_s}s"
    if why is not None:
        jobs = {}
        for n, d in list(cluster.daemons.items()):
            try:
                jobs[n] = (status_json(d.address) or {}).get("jobs")
            except subprocess.TimeoutExpired as e:
                jobs[n] = str(e)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for t in pumps:
        t.join()
    if why is not None:
        timed = sorted(lines["out"] + [(t, "launcher: " + l) for t, l in lines["err"]])
        text = "".join(time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d} "
                       + line for t, line in timed)
        keep = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        for d in list(cluster.daemons.values()):
            if keep:
                shutil.copy(d.log_path, keep)
        pytest.fail(f"the launcher stalled ({why}); stopped it\n{text}\njobs: "
                    f"{json.dumps(jobs, indent=1)}\n{cluster.logs()}", pytrace=False)
    return (p.returncode, "".join(l for _, l in lines["out"]),
            "".join(l for _, l in lines["err"]))


def test_a_dead_worker_is_replaced_and_the_job_grows_back():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        # The default formation timeout (60 s): under load, TensorFlow workers started together
        # reach their daemons tens of seconds apart.
        daemons = [cluster.add(f"el-l{i}") for i in range(2)]
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
                   ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"], ELASTIC_DIE_AT="1:4",
                   ELASTIC_STEPS="30", ELASTIC_SLEEP_S="0.1", ELASTIC_WAIT_AT="14:4")
        code, stdout, stderr = watched_launch(
            cluster, ["--min-np", "2", "--max-np", "4", "-np", "4", "--reset-limit", "5",
                      "--sockets", ",".join(d.socket for d in daemons), "--slots", "2", "--job",
                      "elastic-launch", sys.executable, WORKER], env)
        out = stdout + stderr
        assert code == 0, out + cluster.logs()
        assert "worker 1 on local0 exited with -9" in stderr, out
        assert "started worker 4 on local0" in stderr, out
        finals = finals_of(stdout)
        assert sorted(finals) == [0, 2, 3, 4], out
        assert sorted(f[0] for f in finals.values()) == [0, 1, 2, 3], out
        assert all(f[1] == 4 for f in finals.values()), out
        assert len({json.dumps(f[2]) for f in finals.values()}) == 1, out
        assert all("reference=True" in f[3] for f in finals.values()), out
        lines = [l.partition("] ")[2] for l in stdout.splitlines() if l.startswith("[0] ")]
        assert any(l.startswith("STEP ") and l.endswith(" 3") for l in lines), out  # shrank
        died = float(next(l for l in stdout.splitlines() if l.startswith("[1] DIE ")).split()[2])
        regrown = float(next(l for l in lines if l.startswith("RESUMED ") and l.endswith(" 4")
                             and float(l.split()[1]) > died).split()[1])
        print(f"BENCH worker death -> first collective at 4 ranks again: {regrown - died:.2f} s "
              "(replacement started by the launcher; includes its TensorFlow import)")
    finally:
        cluster.close()


def finals_of(stdout):
    """{launch number: (rank, size, weights, flags)} from the workers' FINAL lines."""
    finals = {}
    for line in stdout.splitlines():
        number, _, rest = line.partition("] ")
        if rest.startswith("FINAL "):
            _, rank, size, tail = rest.split(" ", 3)
            weights, flags = tail.rsplit("] ", 1)
            finals[int(number[1:])] = (int(rank), int(size), json.loads(weights + "]"), flags)
    return finals


def test_a_host_added_mid_run_gets_workers_and_the_job_grows():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        # Hosts from the cluster view: named as this machine, so that the launcher runs their
        # workers directly (no ssh).
        first = cluster.add("localhost")
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
                   ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"], ELASTIC_STEPS="30",
                   ELASTIC_SLEEP_S="0.1", ELASTIC_WAIT_AT="14:4")
        running = threading.Event()
        added = []

        def add_host():  # once the job runs on the first host
            if running.wait(timeout=400):
                added.append(time.time())
                cluster.add("127.0.0.1")

        adder = threading.Thread(target=add_host)
        adder.start()
        try:
            code, stdout, stderr = watched_launch(
                cluster, ["--min-np", "2", "--max-np", "4", "-np", "2", "--slots", "2",
                          "--daemon", first.address, "--allreducectl", binary("allreducectl"),
                          "--job", "elastic-grow", sys.executable, WORKER], env,
                stall_s=150, limit_s=480,
                on_line=lambda line: line.startswith("[0] STEP ") and running.set())
        finally:
            running.set()
            adder.join()
        out = stdout + stderr
        assert code == 0, out + cluster.logs()
        assert "exited with" not in stderr, out
        assert "started worker 2 on 127.0.0.1" in stderr, out
        assert "started worker 3 on 127.0.0.1" in stderr, out
        finals = finals_of(stdout)
        assert sorted(finals) == [0, 1, 2, 3], out
        assert sorted(f[0] for f in finals.values()) == [0, 1, 2, 3], out
        assert all(f[1] == 4 for f in finals.values()), out
        assert len({json.dumps(f[2]) for f in finals.values()}) == 1, out
        assert all("reference=True" in f[3] for f in finals.values()), out
        # The new host's two workers started together: one re-formation took both (2 -> 4).
        assert all("resets=1" in finals[n][3] for n in (0, 1)), out
        steps = {n: [int(l.split()[2]) for l in stdout.splitlines()
                     if l.startswith(f"[{n}] STEP ")] for n in range(4)}
        # The first host's workers ran alone at size 2 first; the new ones began from the
        # committed step (rank 0's state), not from step 0.
        assert any(l.startswith("[0] STEP ") and l.endswith(" 2") for l in stdout.splitlines()), out
        assert steps[2] and steps[3] and min(steps[2][0], steps[3][0]) > 1, out
        lines = [l.partition("] ")[2] for l in stdout.splitlines() if l.startswith("[0] ")]
        grown = float(next(l for l in lines if l.startswith("RESUMED ") and l.endswith(" 4"))
                      .split()[1])
        print(f"BENCH host joined -> first collective at 4 ranks: {grown - added[0]:.2f} s "
              "(the launcher notices within 3 s; includes the new workers' TensorFlow import)")
    finally:
        cluster.close()


def launch(tmp_path, shell, *options, hosts=("--sockets", "/x.sock,/y.sock", "--slots", "1")):
    """The elastic launcher, by default over two pretend hosts of one slot each (their sockets are
    only passed on: the workers here are shell scripts, not clients); the finished process."""
    script = tmp_path / "worker.sh"
    script.write_text(shell)
    return subprocess.run(
        [sys.executable, "-m", "allreduced.launch", *hosts, *options, "sh", str(script)],
        env=dict(os.environ, PYTHONPATH=PACKAGE_DIR), cwd=tmp_path, capture_output=True,
        text=True, timeout=60)


def test_a_failed_worker_is_replaced_and_the_launcher_exits_0_when_the_rest_succeed(tmp_path):
    r = launch(tmp_path, "if [ $ALLREDUCED_RANK = 1 ] && [ ! -e m ]; then touch m; exit 3; fi\n"
               "sleep 1; echo done $ALLREDUCED_RANK $ALLREDUCED_ELASTIC_MIN_NP "
               "$ALLREDUCED_ELASTIC_MAX_NP $ALLREDUCED_ELASTIC_RESET_LIMIT\n",
               "--min-np", "1", "--max-np", "2", "-np", "2", "--reset-limit", "7")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "worker 1 on local1 exited with 3" in r.stderr, r.stderr
    assert "started worker 2 on local1" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] done 0 1 2 7", "[2] done 1 1 2 7"], r.stdout


def test_a_host_whose_workers_keep_failing_is_blacklisted(tmp_path):
    r = launch(tmp_path, "if [ $ALLREDUCED_SOCKET = /y.sock ]; then echo no; exit 4; fi\n"
               "sleep 3\n", "--min-np", "1", "--max-np", "2", "-np", "2")
    assert r.returncode == 0, r.stdout + r.stderr  # worker 0 finished the job
    assert "host local1 blacklisted for 120s after 3 failures" in r.stderr, r.stderr
    assert r.stdout.count("no") == 3, r.stdout  # no worker there after the third failure


def test_the_last_failure_is_the_exit_code(tmp_path):
    r = launch(tmp_path, "exit 5\n", "--min-np", "1", "-np", "1")
    assert r.returncode == 5, r.stdout + r.stderr


def test_sigterm_stops_every_worker_and_exits_143(tmp_path):
    script = tmp_path / "worker.sh"
    script.write_text("echo up $$\nexec sleep 60\n")
    p = subprocess.Popen(
        [sys.executable, "-m", "allreduced.launch", "--sockets", "/x.sock,/y.sock", "--slots", "1",
         "--min-np", "2", "-np", "2", "sh", str(script)],
        env=dict(os.environ, PYTHONPATH=PACKAGE_DIR), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    pids = [int(p.stdout.readline().split()[-1]) for _ in range(2)]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=8) == 143, p.stderr.read()  # not after the 10 s grace: SIGTERM works
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_elastic_options_are_checked(tmp_path):
    r = launch(tmp_path, "exit 0\n", "--min-np", "3", "-np", "2")
    assert r.returncode == 2 and "1 <= --min-np <= -np <= --max-np" in r.stderr, r.stderr
    r = launch(tmp_path, "exit 0\n", "--max-np", "2", "-np", "2")
    assert r.returncode == 2 and "elastic mode needs --min-np" in r.stderr, r.stderr


def test_hosts_that_the_discovery_script_adds_get_workers_up_to_max_np(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:1\n[ -e more ] && echo 127.0.0.1:2\nexit 0\n")
    script.chmod(0o755)
    r = launch(tmp_path, "if [ $ALLREDUCED_RANK = 0 ]; then touch more; sleep 8; exit 0; fi\n"
               "echo grown $ALLREDUCED_RANK $ALLREDUCED_SIZE\n", "--min-np", "1", "--max-np", "2",
               "-np", "1", hosts=("--host-discovery-script", str(script), "--socket", "/z.sock"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "started worker 1 on 127.0.0.1" in r.stderr, r.stderr
    assert "[1] grown 1 2" in r.stdout and "[2]" not in r.stdout, r.stdout  # max_np 2


def test_workers_added_together_on_a_host_share_its_local_size(tmp_path):
    # A host with 2 slots appears: both workers start in one go, each told the host runs 2 (its
    # daemon waits for both: one re-formation) and the job 3.
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:1\n[ -e more ] && echo 127.0.0.1:2\nexit 0\n")
    script.chmod(0o755)
    r = launch(tmp_path, "if [ $ALLREDUCED_RANK = 0 ]; then touch more; sleep 8; exit 0; fi\n"
               "echo added $ALLREDUCED_RANK $ALLREDUCED_SIZE $ALLREDUCED_LOCAL_RANK "
               "$ALLREDUCED_LOCAL_SIZE\n", "--min-np", "1", "--max-np", "3", "-np", "1",
               hosts=("--host-discovery-script", str(script), "--socket", "/z.sock"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(l for l in r.stdout.splitlines() if "added" in l) == [
        "[1] added 1 3 0 2", "[2] added 2 3 1 2"], r.stdout + r.stderr


def test_a_bad_discovery_line_stops_the_launch_with_its_line(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:1\necho 'localhost slots=2'\n")
    script.chmod(0o755)
    r = launch(tmp_path, "exit 0\n", "--min-np", "1",
               hosts=("--host-discovery-script", str(script), "--socket", "/z.sock"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "line 2: expected 'host:slots' (slots >= 1), got 'localhost slots=2'" in r.stderr


def test_the_first_workers_are_numbered_as_a_plain_launch_numbers_them(tmp_path):
    r = launch(tmp_path, "echo $ALLREDUCED_RANK $ALLREDUCED_SIZE $ALLREDUCED_LOCAL_RANK "
               "$ALLREDUCED_LOCAL_SIZE $ALLREDUCED_SOCKET\n", "--min-np", "2", "-np", "3",
               hosts=("--sockets", "/x.sock,/y.sock", "--slots", "2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(r.stdout.splitlines()) == [
        "[0] 0 3 0 2 /x.sock", "[1] 1 3 1 2 /x.sock", "[2] 2 3 0 1 /y.sock"], r.stdout
