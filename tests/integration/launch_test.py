"""allreduced.launch without a daemon or ssh (its ranks here never connect to one): -H, hostfiles
and the cluster view turned into hosts and ranks, the rank variables, RankGroup's environment, and
`python -m allreduced.launch --sockets` failing fast, stopping every rank on SIGINT or SIGTERM and
naming a missing command. launch_ssh_test.py launches through a real sshd against daemons;
tests/tf/tf_ops_test.py runs TensorFlow through it."""
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

import harness  # noqa: F401  (puts python/ on sys.path)
from allreduced import launch
from allreduced.launch import hosts, remote
from harness import wait_until

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(launch.__file__))))


def test_ranks_are_host_major_with_their_variables():
    slots = launch.local_slots(["/a.sock", "/b.sock"], 2)
    assert [(s.rank, s.socket_index, s.local_rank) for s in slots] == [
        (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    assert launch.rank_env(slots[3], "j") == {
        "ALLREDUCED_SOCKET": "/b.sock", "ALLREDUCED_JOB": "j", "ALLREDUCED_RANK": "3",
        "ALLREDUCED_SIZE": "4", "ALLREDUCED_LOCAL_RANK": "1", "ALLREDUCED_LOCAL_SIZE": "2",
        "HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2",
        "HOROVOD_HOSTNAME": "local1"}
    bare = launch.rank_env(slots[2], job=None, give_rank=False)
    assert "ALLREDUCED_JOB" not in bare and "ALLREDUCED_RANK" not in bare
    assert set(launch.rank_env(slots[0], "j")) == set(launch.RANK_VARIABLES)


def test_horovods_variables_for_uneven_hosts():
    """horovodrun's cross rank and size: a host's place among, and the number of, the hosts
    that have a rank of the same local rank."""
    slots = hosts.assign(hosts.discover("a:2,b:1,c:3", socket_path="/s"), 6)
    got = [(s.host, s.local_rank, s.cross_rank, s.cross_size) for s in slots]
    assert got == [("a", 0, 0, 3), ("a", 1, 0, 2), ("b", 0, 1, 3), ("c", 0, 2, 3),
                   ("c", 1, 1, 2), ("c", 2, 0, 1)]
    env = launch.rank_env(slots[4], "j")
    assert (env["HOROVOD_RANK"], env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"],
            env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"], env["HOROVOD_HOSTNAME"]) == (
        "4", "1", "3", "1", "2", "c")


def test_hosts_from_the_command_line_and_a_hostfile(tmp_path):
    assert hosts.parse_hosts("a:2,b:3,c", default_slots=4) == [
        hosts.Host("a", 2, None, False), hosts.Host("b", 3, None, False),
        hosts.Host("c", 4, None, False)]
    assert hosts.parse_hosts("localhost:2")[0].local
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\na slots=2\n\nb:3  # comment\nc\n")
    assert [(h.name, h.slots) for h in hosts.read_hostfile(str(hostfile))] == [
        ("a", 2), ("b", 3), ("c", 1)]
    for bad, why in [("a:0", "slot count"), ("a:x", "slot count"), ("a:1,a:2", "named twice"),
                     (",", "names no host")]:
        with pytest.raises(hosts.HostError, match=why):
            hosts.parse_hosts(bad)
    hostfile.write_text("a slot=2\n")
    with pytest.raises(hosts.HostError, match=r"hosts:1: expected 'host slots=N'"):
        hosts.read_hostfile(str(hostfile))


VIEW = {"hosts": [
    {"name": "a", "state": "UP", "gpus": [{}, {}], "local_socket": "/run/a.sock"},
    {"name": "b", "state": "DOWN", "gpus": [{}, {}], "local_socket": "/run/b.sock"},
    {"name": "c", "state": "UP", "gpus": [{}], "local_socket": "/run/c.sock"}]}


def test_hosts_from_the_cluster_view():
    assert hosts.view_hosts(VIEW) == [hosts.Host("a", 2, "/run/a.sock", False),
                                      hosts.Host("c", 1, "/run/c.sock", False)]
    assert [h.slots for h in hosts.view_hosts(VIEW, slots=3)] == [3, 3]
    cpu = {"hosts": [dict(VIEW["hosts"][0], gpus=[])]}
    with pytest.raises(hosts.HostError, match="host a has no GPUs: give --slots"):
        hosts.view_hosts(cpu)
    named = hosts.with_view_sockets(hosts.parse_hosts("c:2,a:1"), VIEW)
    assert [(h.name, h.socket) for h in named] == [("c", "/run/c.sock"), ("a", "/run/a.sock")]
    with pytest.raises(hosts.HostError,
                       match=r"no UP daemon in the cluster view for b \(UP: a, c\)"):
        hosts.with_view_sockets(hosts.parse_hosts("a,b"), VIEW)


def fake_allreducectl(tmp_path, view):
    """An allreducectl that answers `status --json` with `view`, whatever it is asked."""
    import json
    path = tmp_path / "allreducectl"
    (tmp_path / "view.json").write_text(json.dumps(view))
    path.write_text(f"#!/bin/sh\ncat {tmp_path}/view.json\n")
    path.chmod(0o755)
    return str(path)


CPU_VIEW = {"answered_by": "b", "hosts": [
    {"name": "a", "state": "UP", "gpus": [], "local_socket": "/run/a.sock"},
    {"name": "b", "state": "UP", "gpus": [], "local_socket": "/run/b.sock"}]}


def test_np_alone_on_cpu_hosts_runs_every_rank_on_the_answering_host(tmp_path):
    """horovodrun -np N without hosts is localhost:N: without GPUs, -H or --slots the ranks go
    to the host whose daemon answered the cluster view; GPU hosts keep one rank per GPU."""
    ctl = fake_allreducectl(tmp_path, CPU_VIEW)
    assert hosts.discover(allreducectl=ctl, np=3) == [hosts.Host("b", 3, "/run/b.sock", True)]
    assert not hosts.discover(allreducectl=ctl, np=3, daemon="10.9.9.9:7070")[0].local
    assert [h.slots for h in hosts.discover(allreducectl=ctl, slots=2, np=3)] == [2, 2]
    gpu_ctl = fake_allreducectl(tmp_path, dict(VIEW, answered_by="a"))
    assert [h.name for h in hosts.discover(allreducectl=gpu_ctl, np=3)] == ["a", "c"]
    gone = fake_allreducectl(tmp_path, dict(CPU_VIEW, answered_by="z"))
    with pytest.raises(hosts.HostError, match=r"daemon that answered \(z\) is not an UP host"):
        hosts.discover(allreducectl=gone, np=3)

    # The launcher end to end: every rank on b, with horovodrun's variables.
    ctl = fake_allreducectl(tmp_path, CPU_VIEW)
    r = subprocess.run([sys.executable, "-m", "allreduced.launch", "-np", "3", "--", "sh", "-c",
                        "echo $HOROVOD_RANK/$HOROVOD_SIZE/$HOROVOD_LOCAL_RANK/"
                        "$HOROVOD_CROSS_SIZE/$HOROVOD_HOSTNAME/$ALLREDUCED_SOCKET"],
                       env=dict(os.environ, PYTHONPATH=PACKAGE_DIR, ALLREDUCECTL=ctl),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [f"[{i}] {i}/3/{i}/1/b//run/b.sock" for i in range(3)]


def test_one_socket_for_every_host_skips_the_cluster_view():
    assert hosts.discover("a:2,b", socket_path="/s.sock") == [
        hosts.Host("a", 2, "/s.sock", False), hosts.Host("b", 1, "/s.sock", False)]
    with pytest.raises(hosts.HostError, match="--socket needs the hosts"):
        hosts.discover(socket_path="/s.sock")


def test_remote_ranks_get_the_environment_less_this_machines_own():
    env = {"PATH": "/venv/bin:/usr/bin", "TRAIN_FLAG": "a b'c", "HOME": "/root", "PWD": "/x",
           "SSH_AUTH_SOCK": "/tmp/agent", "XDG_RUNTIME_DIR": "/run/user/0",
           "BASH_FUNC_f%%": "() { :; }"}
    assert remote.forwarded_env(env) == {"PATH": "/venv/bin:/usr/bin", "TRAIN_FLAG": "a b'c"}
    argv = remote.ssh_command("b", ["python", "train.py"], {"TRAIN_FLAG": "a b'c"}, cwd="/w d",
                              ssh_port=2222, identity_file="/k", config_file="/cfg")
    assert argv[:10] == ["ssh", "-o", "BatchMode=yes", "-F", "/cfg", "-p", "2222", "-i", "/k",
                         "--"]
    assert argv[10] == "b"
    assert shlex.split(argv[11]) == ["env", "TRAIN_FLAG=a b'c", "sh", "-c", remote.WRAPPER,
                                     "allreduced-rank", "/w d", "100", "python", "train.py"]


def test_ranks_fill_the_hosts_in_order():
    slots = hosts.assign(hosts.view_hosts(VIEW), 3)
    assert [(s.rank, s.host, s.local_rank, s.local_size, s.host_index) for s in slots] == [
        (0, "a", 0, 2, 0), (1, "a", 1, 2, 0), (2, "c", 0, 1, 1)]
    assert [s.host for s in hosts.assign(hosts.view_hosts(VIEW), 1)] == ["a"]
    with pytest.raises(hosts.HostError, match=r"-np 4: the hosts have 3 slot\(s\) \(a:2, c:1\)"):
        hosts.assign(hosts.view_hosts(VIEW), 4)


def env_of(group):
    """Each rank's rank variables and ARD_T_* variables, as the rank printed them."""
    lines = [[] for _ in group.procs]
    group.read_lines(lambda rank, line: lines[rank].append(line.strip()))
    assert group.wait(timeout_s=30) is None
    return [{k: v for k, v in (l.split("=", 1) for l in out if "=" in l)
             if k in launch.RANK_VARIABLES or k.startswith("ARD_T_")} for out in lines]


def test_rank_group_environment(monkeypatch):
    monkeypatch.setenv("ALLREDUCED_RANK", "7")  # inherited: never passed on
    monkeypatch.setenv("ARD_T_KEPT", "kept")
    env = env_of(launch.RankGroup(["/a.sock", "/b.sock"], 1, ["env"], job="j", text=True,
                                  env=lambda slot: {"ARD_T_HOST": str(slot.socket_index)}))
    assert [e["ALLREDUCED_RANK"] for e in env] == ["0", "1"]
    assert [e["ARD_T_HOST"] for e in env] == ["0", "1"]
    assert all(e["ARD_T_KEPT"] == "kept" and e["ALLREDUCED_JOB"] == "j" for e in env)

    env = env_of(launch.RankGroup(["/a.sock"], 2, ["env"], job="j", text=True,
                                  env_for_rank=lambda slot: {"ARD_T_RANK": str(slot.rank)}))
    assert env == [{"ALLREDUCED_SOCKET": "/a.sock", "ARD_T_RANK": "0", "ARD_T_KEPT": "kept"},
                   {"ALLREDUCED_SOCKET": "/a.sock", "ARD_T_RANK": "1", "ARD_T_KEPT": "kept"}]


def test_wait_kills_ranks_past_the_deadline():
    group = launch.RankGroup(["/a.sock"], 2, ["sh", "-c", '[ "$ALLREDUCED_RANK" = 0 ] || sleep 60'])
    assert group.wait(timeout_s=1) is None  # no rank failed on its own
    assert group.timed_out == [1]
    assert group.procs[1].returncode == -signal.SIGKILL
    assert group.procs[0].returncode == 0 and group.running() == []


def start_launcher(tmp_path, np_, script):
    """`python -m allreduced.launch -np np_` over two sockets; each rank says hello, writes its
    pid to tmp_path/RANK.pid, then runs `script` (sh)."""
    rank = (f'echo "hello from $ALLREDUCED_RANK"; echo $$ > {tmp_path}/"$ALLREDUCED_RANK".pid; '
            + script)
    return subprocess.Popen(
        [sys.executable, "-m", "allreduced.launch", "--sockets", "/a.sock,/b.sock", "-np",
         str(np_), "--", "sh", "-c", rank], env=dict(os.environ, PYTHONPATH=PACKAGE_DIR),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rank_pids(tmp_path, count, suffix="pid"):
    def read():
        try:
            pids = [int(open(tmp_path / f"{r}.{suffix}").read()) for r in range(count)]
        except (OSError, ValueError):
            return None
        return pids
    return wait_until(read, 30, f"{count} ranks to start")


def alive(pid):
    """Running: not gone, and not a zombie that its new parent has yet to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_launcher_names_a_command_it_cannot_start():
    for missing, why in [("/nonexistent/trainer", "No such file or directory"),
                         ("nonexistent-trainer", "command not found")]:
        r = subprocess.run([sys.executable, "-m", "allreduced.launch", "--sockets", "/a.sock",
                            "-np", "2", "--", missing],
                           env=dict(os.environ, PYTHONPATH=PACKAGE_DIR), capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 127, r.stderr
        assert (r.stdout, r.stderr) == ("", f"allreduced.launch: cannot start {missing}: {why}\n")


def test_launcher_prefixes_output_and_fails_fast(tmp_path):
    # Rank 2 fails once every rank has started; the others would sleep for a minute.
    p = start_launcher(tmp_path, 4, 'if [ "$ALLREDUCED_RANK" = 2 ]; then '
                                    f'while [ $(ls {tmp_path} | wc -l) -lt 4 ]; do sleep 0.05; done; '
                                    "exit 3; fi; exec sleep 60")
    try:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3, out + err
        assert "allreduced.launch: rank 2 exited with 3; stopping the others" in err
        for r in range(4):
            assert f"[{r}] hello from {r}" in out.splitlines()
        assert not any(alive(pid) for pid in rank_pids(tmp_path, 4))
    finally:
        p.kill()


@pytest.mark.parametrize("signo,ignore_term", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_signal_to_the_launcher_stops_every_rank(tmp_path, signo, ignore_term):
    """Ctrl-C (SIGINT) or SIGTERM reaches only the launcher (the ranks have sessions of their
    own): it stops every rank and the processes they started, a rank that ignores SIGTERM too (by
    SIGKILL after a 10 s grace), and exits 128 + the signal."""
    trap = 'if [ "$ALLREDUCED_RANK" = 1 ]; then trap "" TERM; fi; ' if ignore_term else ""
    p = start_launcher(tmp_path, 4, trap + f'sleep 60 & echo $! > {tmp_path}/"$ALLREDUCED_RANK".child; '
                                           "wait; sleep 60")
    pids = []
    try:
        pids = rank_pids(tmp_path, 4) + rank_pids(tmp_path, 4, "child")
        start = time.monotonic()
        p.send_signal(signo)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 128 + signo, out + err
        assert f"{signal.Signals(signo).name}; stopping every rank" in err
        left = [pid for pid in pids if alive(pid)]
        assert not left, (left, [open(f"/proc/{p}/stat").read() for p in left], out, err)
        assert time.monotonic() - start < 30
    finally:
        p.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_discovery_interval_is_a_flag(tmp_path):
    """Elastic mode asks its discovery script again every --discovery-interval seconds (horovodrun
    asks every second; tests want it shorter)."""
    calls = tmp_path / "calls"
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\necho x >> {calls}\necho localhost:2\n")
    script.chmod(0o755)
    done = tmp_path / "done"
    # The one worker runs until the script was asked 6 times (the start counts once), then exits 0.
    worker = (f'while [ $(wc -l < {calls}) -lt 6 ]; do sleep 0.05; done; touch {done}')
    r = subprocess.run([sys.executable, "-m", "allreduced.launch", "--min-np", "1", "-np", "1",
                        "--host-discovery-script", str(script), "--socket", "/x.sock",
                        "--discovery-interval", "0.1", "--", "sh", "-c", worker],
                       env=dict(os.environ, PYTHONPATH=PACKAGE_DIR), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert done.exists()
    bad = subprocess.run([sys.executable, "-m", "allreduced.launch", "--min-np", "1",
                          "--discovery-interval", "0", "--", "true"],
                         env=dict(os.environ, PYTHONPATH=PACKAGE_DIR), capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--discovery-interval takes a number of seconds > 0" in bad.stderr
