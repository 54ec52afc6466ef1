"""`python -m allreduced.launch` and `allreducectl run` against real daemons, with the ranks of
"host b" started through a real OpenSSH server (Debian's openssh-server) that the test runs on a
loopback port with a generated host key and user key; the system's sshd and its configuration
are left alone. This machine's daemon is named after its host name, so its ranks start directly.
Covers hosts from the cluster view and from -H, a job across both, stopping on SIGINT/SIGTERM
(no rank left on either side), a remote rank failing, and commands that cannot start."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import Cluster, binary, status_json, wait_until
from launch_test import PACKAGE_DIR, alive

LOCAL = socket.gethostname()
CWD = os.path.realpath(os.getcwd())  # the ranks' working directory, on either host


class Sshd:
    """sshd -D on 127.0.0.1:<free port> in `workdir`, accepting the generated user key for the
    user running the test; ssh_config names it "b"."""

    def __init__(self, workdir):
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        assert os.path.exists(sshd), "sshd not found: install openssh-server (tools/bootstrap.sh)"
        if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
            # sshd run by root wants its privilege-separation directory (the ssh unit's
            # RuntimeDirectory); the package does not create it outside systemd.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for key in ("host_key", "user_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            f"{workdir}/{key}"], check=True)
        shutil.copy(f"{workdir}/user_key.pub", f"{workdir}/authorized_keys")
        self.log_path = f"{workdir}/sshd.log"
        for _ in range(5):  # another process may take the free port before sshd binds it
            self.port = free_port()
            with open(f"{workdir}/sshd_config", "w") as f:
                f.write(f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {workdir}/host_key\n"
                        f"AuthorizedKeysFile {workdir}/authorized_keys\nPidFile none\n"
                        "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
                        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n")
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", f"{workdir}/sshd_config"],
                                         stdout=self.log, stderr=subprocess.STDOUT)
            if wait_until(self._started, 15, "sshd to listen") == "listening":
                break
        else:
            raise AssertionError("sshd did not start:\n" + self.read_log())
        with open(f"{workdir}/host_key.pub") as f:
            host_key = " ".join(f.read().split()[:2])
        with open(f"{workdir}/known_hosts", "w") as f:
            f.write(f"[127.0.0.1]:{self.port} {host_key}\n")
        self.config = f"{workdir}/ssh_config"
        with open(self.config, "w") as f:
            f.write(f"Host b\n  HostName 127.0.0.1\n  Port {self.port}\n"
                    f"  IdentityFile {workdir}/user_key\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {workdir}/known_hosts\n  StrictHostKeyChecking yes\n"
                    "  LogLevel ERROR\n")

    def _started(self):
        text = self.read_log()
        if "Server listening on" in text:
            return "listening"
        return "failed" if self.proc.poll() is not None else None

    def read_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def setup():
    """This machine's daemon (the coordinator) and b's, both UP, and b's sshd."""
    cluster = Cluster(heartbeat_ms=100, host_timeout_ms=10000)
    sshd = None
    try:
        cluster.add(LOCAL)
        cluster.add("b")
        wait_until(lambda: len([h for h in (status_json(cluster.daemons[LOCAL].address) or {})
                                .get("hosts", []) if h["state"] == "UP"]) == 2, 15, "two UP")
        sshd = Sshd(cluster.workdir)
        yield cluster, sshd
    finally:
        if sshd:
            sshd.close()
        cluster.close()


def launcher_env():
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, ALLREDUCED_PYTHON=sys.executable)
    env.pop("SSH_CONNECTION", None)  # set by sshd in a remote rank's session: tells it apart
    return env


def launch_argv(setup, *args):
    cluster, sshd = setup
    return ([sys.executable, "-m", "allreduced.launch", "--daemon",
             cluster.daemons[LOCAL].address, "--allreducectl", binary("allreducectl"),
             "--ssh-config-file", sshd.config] + list(args))


def run(argv, timeout_s=120):
    return subprocess.run(argv, env=launcher_env(), capture_output=True, text=True,
                          timeout=timeout_s)


# Each rank prints where it runs: rank, "ssh" when started through sshd, socket, local rank and
# size, job, working directory.
WHERE = ('how=direct; [ -z "$SSH_CONNECTION" ] || how=ssh; echo "WHERE $ALLREDUCED_RANK $how '
         '$ALLREDUCED_SOCKET $ALLREDUCED_LOCAL_RANK/$ALLREDUCED_LOCAL_SIZE $ALLREDUCED_SIZE '
         '$ALLREDUCED_JOB $(pwd -P)"')


def where(out):
    """rank -> (how, socket, local rank/size, size, job, cwd), from the [rank] WHERE lines."""
    rows = {}
    for line in out.splitlines():
        prefix, _, rest = line.partition(" ")
        if rest.startswith("WHERE "):
            fields = rest.split()[1:]
            assert prefix == f"[{fields[0]}]", line
            rows[int(fields[0])] = tuple(fields[1:])
    return rows


def test_cluster_view_hosts_run_a_job_over_ssh(setup):
    """No hosts given: both UP hosts of the cluster view, 2 slots each; b's ranks go through
    sshd with b's socket, and the four ranks form one job across the two daemons."""
    cluster, sshd = setup
    command = ["sh", "-c", WHERE + '; exec "$0" "$@"', binary("collective_worker"), "matrix"]
    r = run(launch_argv(setup, "-np", "4", "--slots", "2", "--job", "over-ssh", "--") + command,
            timeout_s=240)
    assert r.returncode == 0, r.stdout + r.stderr
    local, b = cluster.daemons[LOCAL].socket, cluster.daemons["b"].socket
    hosts_first = sorted([LOCAL, "b"])  # the view lists hosts by name
    sockets = {LOCAL: local, "b": b}
    rows = where(r.stdout)
    for rank in range(4):
        host = hosts_first[rank // 2]
        assert rows[rank] == ("direct" if host == LOCAL else "ssh", sockets[host],
                              f"{rank % 2}/2", "4", "over-ssh", CWD), rows
        assert f"[{rank}] TOPOLOGY {rank} 4 {rank % 2} 2 {rank // 2} 2" in r.stdout.splitlines()
        assert any(l.startswith(f"[{rank}] DONE ") for l in r.stdout.splitlines())
    assert "MISMATCH" not in r.stdout
    assert sshd.read_log().count("Accepted publickey") >= 2


def test_hosts_from_the_command_line(setup):
    """-H order decides the ranks; the sockets still come from the cluster view."""
    cluster, _ = setup
    r = run(launch_argv(setup, "-np", "3", "-H", f"b:2,{LOCAL}:1", "--", "sh", "-c", WHERE))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = where(r.stdout)
    b, local = cluster.daemons["b"].socket, cluster.daemons[LOCAL].socket
    job = rows[0][4]
    assert rows == {0: ("ssh", b, "0/2", "3", job, CWD),
                    1: ("ssh", b, "1/2", "3", job, CWD),
                    2: ("direct", local, "0/1", "3", job, CWD)}

    r = run(launch_argv(setup, "-np", "2", "-H", "b:1,nowhere:1", "--", "true"))
    assert r.returncode == 2
    assert r.stderr == ("allreduced.launch: no UP daemon in the cluster view for nowhere (UP: "
                        f"{', '.join(sorted(['b', LOCAL]))}); or give the socket with --socket\n")


def start(setup, tmp_path, np_, script, *args):
    """The launcher over both hosts (2 slots each) in the background; each rank writes its pid
    to tmp_path/RANK.pid, then runs `script` (sh)."""
    rank = f'echo $$ > {tmp_path}/"$ALLREDUCED_RANK".pid; ' + script
    return subprocess.Popen(launch_argv(setup, "-np", str(np_), "--slots", "2", *args, "--",
                                        "sh", "-c", rank),
                            env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def pids(tmp_path, count, suffix):
    def read():
        try:
            return [int(open(tmp_path / f"{r}.{suffix}").read()) for r in range(count)]
        except (OSError, ValueError):
            return None
    return wait_until(read, 30, f"{count} {suffix} files")


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_rank_on_both_hosts(setup, tmp_path, signo):
    """Every rank and the process it started are gone, b's through ssh, a rank of b's that
    ignores SIGTERM included (SIGKILL after the grace), and the exit code is 128 + signal."""
    remote_rank = 2 if sorted([LOCAL, "b"])[0] == LOCAL else 0
    script = (f'if [ "$ALLREDUCED_RANK" = {remote_rank} ]; then trap "" TERM; fi; '
              f'sleep 60 & echo $! > {tmp_path}/"$ALLREDUCED_RANK".child; wait; sleep 60')
    p = start(setup, tmp_path, 4, script)
    started = []
    try:
        started = pids(tmp_path, 4, "pid") + pids(tmp_path, 4, "child")
        begin = time.monotonic()
        p.send_signal(signo)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 128 + signo, out + err
        assert f"{signal.Signals(signo).name}; stopping every rank" in err
        left = [pid for pid in started if alive(pid)]
        assert not left, (left, out, err)
        assert time.monotonic() - begin < 30
    finally:
        p.kill()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_remote_rank_failing_stops_the_others(setup, tmp_path):
    remote_rank = 3 if sorted([LOCAL, "b"])[0] == LOCAL else 1
    script = (f'if [ "$ALLREDUCED_RANK" = {remote_rank} ]; then '
              f'while [ $(ls {tmp_path} | wc -l) -lt 4 ]; do sleep 0.05; done; exit 3; fi; '
              'exec sleep 60')
    p = start(setup, tmp_path, 4, script)
    started = []
    try:
        out, err = p.communicate(timeout=60)
        started = pids(tmp_path, 4, "pid")
        assert p.returncode == 3, out + err
        assert (f"allreduced.launch: rank {remote_rank} on b exited with 3; stopping the "
                "others") in err
        assert not [pid for pid in started if alive(pid)]
    finally:
        p.kill()


def test_commands_that_cannot_start(setup):
    r = run(launch_argv(setup, "-np", "3", "--slots", "2", "--", "no-such-trainer"))
    assert (r.returncode, r.stdout, r.stderr) == (
        127, "", "allreduced.launch: cannot start no-such-trainer: command not found\n")
    # Only on b: its rank says so through ssh, and the exit code is the same.
    r = run(launch_argv(setup, "-np", "1", "-H", "b:1", "--", "no-such-trainer"))
    assert r.returncode == 127, r.stdout + r.stderr
    assert "[0] setsid: failed to execute no-such-trainer: No such file or directory" in r.stdout


def test_a_host_ssh_cannot_reach(tmp_path):
    """ssh's own failure is the rank's exit code 255, with ssh's message under the rank."""
    port = free_port()  # nothing listens there
    config = tmp_path / "ssh_config"
    config.write_text(f"Host down\n  HostName 127.0.0.1\n  Port {port}\n")
    r = run([sys.executable, "-m", "allreduced.launch", "-np", "1", "-H", "down:1", "--socket",
             "/x.sock", "--ssh-config-file", str(config), "--", "true"])
    assert r.returncode == 255, r.stdout + r.stderr
    assert f"[0] ssh: connect to host 127.0.0.1 port {port}: Connection refused" in r.stdout
    assert r.stderr == ("allreduced.launch: rank 0 on down exited with 255 (ssh exits 255 when it "
                        "fails: see its message above); stopping the others\n")


def test_allreducectl_run(setup):
    """`allreducectl run` is the same launcher: it passes its own path and --daemon on."""
    cluster, sshd = setup
    ctl = [binary("allreducectl"), "--daemon", cluster.daemons[LOCAL].address, "run"]
    r = run(ctl + ["-np", "3", "--slots", "2", "--ssh-config-file", sshd.config, "sh", "-c",
                   WHERE])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = where(r.stdout)
    assert sorted(rows) == [0, 1, 2]
    assert {rows[r][1] for r in rows} == {cluster.daemons[LOCAL].socket,
                                           cluster.daemons["b"].socket}
    r = run(ctl + ["-np", "1", "-H", f"{LOCAL}:1", "--", "no-such-trainer"])
    assert (r.returncode, r.stderr) == (
        127, "allreducectl run: cannot start no-such-trainer: command not found\n")
