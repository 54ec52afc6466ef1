"""The launcher's elastic mode: SlotTable's bookkeeping, blacklist and cooldown, the discovery
script's parsing, the launcher's notices (pure); its rules with shell workers (a failed worker's
host blacklisted, the reset limit, a host dropped, a job that finished); and
`python -m allreduced.launch --min-np 2 --max-np 4 -np 4` over 3 real daemons x 2 slots with real
TensorFlow workers (elastic_worker.py): a worker dies, its host leaves the job, the launcher
starts two workers on the free host, the job grows back to 4 and finishes; and over the cluster
view: a daemon joins mid-run, the launcher starts workers there, the job grows."""
import json
import math
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
    table.release("b")
    assert [(h.name, i) for h, i in table.free(0)] == [("a", 1), ("b", 0)]
    table.take("b")
    table.update([Host("a", 2, "/a", True)])  # b is gone: its worker is to stop, no new one
    assert table.gone() == ["b"]
    assert [(h.name, i) for h, i in table.free(0)] == [("a", 1)]
    table.release("b")
    assert table.gone() == []


def test_a_blacklisted_host_without_a_cooldown_range_stays_blacklisted():
    table = elastic.SlotTable()
    table.update([Host("a", 2, "/a", True), Host("b", 1, "/b", True)])
    table.take("a")
    assert table.blacklist("a", 5) == math.inf
    assert table.blacklist("a", 6) is None  # already
    assert [h.name for h, _ in table.free(1e9)] == ["b"]  # no slot of a, not even the free one


def test_the_cooldown_doubles_per_blacklisting_with_jitter_and_stays_in_its_range():
    jitter = iter([0.0, 0.5, 0.0, 0.999, 0.0])
    table = elastic.SlotTable(cooldown_range=(2, 10), jitter=lambda: next(jitter))
    table.update([Host("a", 1, "/a", True)])
    assert table.blacklist("a", 0) == 2  # 2 * 2**0 + 0
    assert [h.name for h, _ in table.free(1.9)] == [] and table.free(2.1)
    assert table.blacklist("a", 100) == 5  # 2 * 2**1 + 0.5 * 2
    assert table.blacklist("a", 200) == 8  # 2 * 2**2
    assert table.blacklist("a", 300) == 10  # 16 + ~2, capped
    assert table.blacklist("a", 400) == 10
    assert [elastic.cooldown_s(n, 3, 3, 0.9) for n in (1, 2, 70)] == [3, 3, 3]


def test_launch_notices_reach_the_workers_they_concern(tmp_path, monkeypatch):
    # The launcher's side (elastic_run.Notices) and a worker's (common.launch_notice), in one
    # process: worker 1's view of workers 2 and 3 started, then of a host removed.
    from allreduced.common import launch_notice
    from allreduced.launch.elastic_run import Notices
    from allreduced.launch.hosts import Slot
    notices = Notices()
    try:
        env = notices.env(Slot(1, 2, 0, "h", "/s", 1, 2, True), 1)
        assert notices.env(Slot(1, 2, 0, "r", "/s", 1, 2, False), 1) == {}  # remote: none
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(launch_notice, "_seen", [0])

        class FakeState:
            def __init__(self):
                self.messages = []

            def on_hosts_updated(self, timestamp, result):
                self.messages.append(result)

        state = FakeState()
        launch_notice.watch(state)
        notices.added([0, 1])  # the batch worker 1 came with: no news to it
        launch_notice.poll()
        assert state.messages == []
        notices.added([2, 3])
        notices.removed(4)
        launch_notice.poll()
        assert state.messages == [launch_notice.ADDED, launch_notice.REMOVED]
        assert launch_notice.wait_for_new_workers(timeout_s=0) == [2, 3]
        monkeypatch.setenv("ALLREDUCED_ELASTIC_WORKER", "2")
        launch_notice.arrive(timeout_s=0)  # worker 2 arrived; 3 exits
        monkeypatch.setenv("ALLREDUCED_ELASTIC_WORKER", "1")
        notices.exited(3)
        assert launch_notice.wait_for_new_workers(timeout_s=0) == []
        monkeypatch.setenv("ALLREDUCED_ELASTIC_WORKER", "1")
        launch_notice.failed()
        assert notices.failed(1) and not notices.failed(0)
        assert launch_notice.training_failed()
    finally:
        launch_notice._failed[0] = False
        launch_notice._states.discard(state)
        notices.remove()


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


def test_a_dead_worker_s_host_leaves_and_the_job_grows_back_on_a_free_one():
    cluster = Cluster(host_timeout_ms=10000)
    try:
        # The default formation timeout (60 s): under load, TensorFlow workers started together
        # reach their daemons tens of seconds apart.
        daemons = [cluster.add(f"el-l{i}") for i in range(3)]
        env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, TF_CPP_MIN_LOG_LEVEL="3",
                   ALLREDUCED_TF_OPS=os.environ["ARD_BIN_TF_OPS"], ELASTIC_DIE_AT="1:4",
                   ELASTIC_STEPS="30", ELASTIC_SLEEP_S="0.1", ELASTIC_WAIT_AT="14:4")
        code, stdout, stderr = watched_launch(
            cluster, ["--min-np", "2", "--max-np", "4", "-np", "4", "--reset-limit", "5",
                      "--sockets", ",".join(d.socket for d in daemons), "--slots", "2", "--job",
                      "elastic-launch", sys.executable, WORKER], env)
        out = stdout + stderr
        assert code == 0, out + cluster.logs()
        # Worker 1 dies: its host (both slots) is blacklisted, worker 0 stopped; the free host
        # gets two workers and the job grows back to 4.
        assert "worker 1 on local0 exited with -9" in stderr, out
        assert "host local0 blacklisted for good" in stderr, out
        assert "started worker 4 on local2" in stderr, out
        assert "started worker 5 on local2" in stderr, out
        finals = finals_of(stdout)
        assert sorted(finals) == [2, 3, 4, 5], out
        assert sorted(f[0] for f in finals.values()) == [0, 1, 2, 3], out
        assert all(f[1] == 4 for f in finals.values()), out
        assert len({json.dumps(f[2]) for f in finals.values()}) == 1, out
        assert all("reference=True" in f[3] for f in finals.values()), out
        died = float(next(l for l in stdout.splitlines() if l.startswith("[1] DIE ")).split()[2])
        lines = [l.partition("] ")[2] for l in stdout.splitlines() if l.startswith("[2] ")]
        regrown = float(next(l for l in lines if l.startswith("RESUMED ") and l.endswith(" 4")
                             and float(l.split()[1]) > died).split()[1])
        print(f"BENCH worker death -> first collective at 4 ranks again: {regrown - died:.2f} s "
              "(replacements started by the launcher; includes their TensorFlow import)")
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


def test_a_failed_worker_is_replaced_on_another_host(tmp_path):
    r = launch(tmp_path, "if [ $ALLREDUCED_RANK = 1 ] && [ ! -e m ]; then touch m; exit 3; fi\n"
               "sleep 1; echo done $ALLREDUCED_RANK $ALLREDUCED_ELASTIC_MIN_NP "
               "$ALLREDUCED_ELASTIC_MAX_NP $HOROVOD_HOSTNAME\n",
               "--min-np", "1", "--max-np", "2", "-np", "2", "--reset-limit", "7",
               hosts=("--sockets", "/x.sock,/y.sock,/z.sock", "--slots", "1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "worker 1 on local1 exited with 3" in r.stderr, r.stderr
    assert "host local1 blacklisted for good" in r.stderr, r.stderr
    assert "started worker 2 on local2" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] done 0 1 2 local0", "[2] done 1 1 2 local2"]


def test_a_failed_worker_blacklists_its_host_and_stops_the_host_s_other_workers(tmp_path):
    # Ranks 0 and 1 on local0, 2 on local1: rank 1 fails, so local0 is out (rank 0 stopped) and
    # the free slot of local1 gets a new worker; the job ends well on local1.
    r = launch(tmp_path, "if [ $ALLREDUCED_RANK = 1 ] && [ $ALLREDUCED_SOCKET = /x.sock ]; then\n"
               "  exit 4\nfi\n"
               "[ $ALLREDUCED_RANK = 0 ] && exec sleep 60\nsleep 3; echo done\n",
               "--min-np", "1", "--max-np", "3", "-np", "3",
               hosts=("--sockets", "/x.sock,/y.sock", "--slots", "2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "host local0 blacklisted for good" in r.stderr, r.stderr
    assert "started worker 3 on local1" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[2] done", "[3] done"], r.stdout + r.stderr


def test_a_blacklisted_host_gets_workers_again_after_its_cooldown(tmp_path):
    r = launch(tmp_path, "if [ $ALLREDUCED_RANK = 1 ] && [ ! -e m ]; then touch m; exit 3; fi\n"
               "if [ $ALLREDUCED_RANK = 0 ]; then while [ ! -e back ]; do sleep 0.1; done; fi\n"
               "touch back; echo done $HOROVOD_HOSTNAME\n",
               "--min-np", "1", "--max-np", "2", "-np", "2", "--blacklist-cooldown-range", "1",
               "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "host local1 blacklisted for 1.0s" in r.stderr, r.stderr
    assert "started worker 2 on local1" in r.stderr, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] done local0", "[2] done local1"], r.stdout


def test_the_job_stops_at_its_reset_limit_counted_over_all_workers(tmp_path):
    # Rank 1 fails (reset 1); its host's cooldown ends and a worker starts there again (reset
    # 2): over a limit of 1 the job stops there (rank 0, waiting for that worker, is stopped);
    # with a limit of 2 it finishes.
    worker = ("if [ $ALLREDUCED_RANK = 1 ] && [ ! -e m ]; then touch m; exit 3; fi\n"
              "if [ $ALLREDUCED_RANK = 0 ]; then while [ ! -e back ]; do sleep 0.1; done; fi\n"
              "touch back; echo done $HOROVOD_HOSTNAME\n")
    options = ("--min-np", "1", "--max-np", "2", "-np", "2", "--blacklist-cooldown-range", "1",
               "1")
    r = launch(tmp_path, worker, *options, "--reset-limit", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "reset 2 times, over its reset limit of 1 (--reset-limit)" in r.stderr, r.stderr
    assert "started worker 2" not in r.stderr and r.stdout == "", r.stdout + r.stderr
    (tmp_path / "m").unlink()
    r = launch(tmp_path, worker, *options, "--reset-limit", "2")
    assert r.returncode == 0 and "reset limit" not in r.stderr, r.stdout + r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] done local0", "[2] done local1"], r.stdout


def test_a_replacement_started_as_the_job_ends_does_not_fail_it(tmp_path):
    # Rank 1 fails; its replacement (worker 2) starts while rank 0 finishes the job: the
    # replacement would wait for a job that is gone (here: exit 3 after 40 s). It is stopped
    # (after the launcher's 10 s grace) and the launch exits 0.
    r = launch(tmp_path, "case $ALLREDUCED_RANK in 1) [ -e m ] || { touch m; exit 3; };"
               " touch started; exec sleep 40;;\n0) while [ ! -e started ]; do sleep 0.1; done;"
               " echo done;;"
               " esac\n", "--min-np", "1", "--max-np", "2", "-np", "2",
               hosts=("--sockets", "/x.sock,/y.sock,/z.sock", "--slots", "1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "started after the job's last generation" in r.stderr, r.stderr


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


def test_a_host_that_discovery_drops_leaves_the_job(tmp_path):
    # 127.0.0.1's worker makes the script drop its host; it is stopped (else it would exit 3 after
    # 40 s) and the job ends well on localhost once it is gone.
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:1\n[ -e drop ] || echo 127.0.0.1:1\n")
    script.chmod(0o755)
    started = time.monotonic()
    r = launch(tmp_path, "if [ $HOROVOD_HOSTNAME = 127.0.0.1 ]; then\n"
               "  echo $$ > p.tmp; mv p.tmp pid1; touch drop; sleep 40; exit 3\nfi\n"
               "while [ ! -e pid1 ]; do sleep 0.1; done\n"
               "while kill -0 $(cat pid1) 2>/dev/null; do sleep 0.1; done; echo done\n",
               "--min-np", "1", "--max-np", "2", "-np", "2", "--discovery-interval", "0.1",
               hosts=("--host-discovery-script", str(script), "--socket", "/z.sock"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "host 127.0.0.1 is no longer available; stopping its workers" in r.stderr, r.stderr
    assert r.stdout == "[0] done\n", r.stdout + r.stderr
    assert time.monotonic() - started < 35, r.stderr


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
