"""Starts real allreduced daemons and runs allreducectl against them, for integration tests.

Each daemon is one "host": its own host name, loopback port (0: picked by the kernel, read back
from --port_file) and a short local-socket path under a private /tmp directory (Bazel's
TEST_TMPDIR is too long for a Unix socket path).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# allreduced.launch from the source tree (Bazel puts it in the runfiles at the same place).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
from allreduced.launch import RankGroup  # noqa: E402


def binary(name):
    path = os.environ.get("ARD_BIN_" + name.upper())
    if not path:
        raise RuntimeError(f"ARD_BIN_{name.upper()} not set: run through Bazel (tests/BUILD)")
    return path


def wait_until(predicate, timeout_s, what, interval_s=0.05):
    """Polls predicate() until it returns a truthy value; fails naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class Daemon:
    """One allreduced process acting as one host."""

    def __init__(self, workdir, name, coordinator=None, heartbeat_ms=100, host_timeout_ms=1000,
                 extra_flags=(), env=None, command_prefix=()):
        self.workdir = workdir
        self.name = name
        self.coordinator = coordinator
        self.port_file = os.path.join(workdir, name + ".port")
        self.socket = os.path.join(workdir, name + ".sock")
        self.log_path = os.path.join(workdir, name + ".log")
        self.flags = [
            "--cluster_address=127.0.0.1:0",
            f"--host_name={name}",
            f"--local_socket={self.socket}",
            f"--port_file={self.port_file}",
            f"--heartbeat_ms={heartbeat_ms}",
            f"--host_timeout_ms={host_timeout_ms}",
            "--rpc_timeout_ms=500",
            "--join_backoff_max_ms=300",
        ] + ([f"--coordinator={coordinator}"] if coordinator else []) + list(extra_flags)
        self.env = env
        self.command_prefix = list(command_prefix)  # e.g. ["ip", "netns", "exec", NAME]
        self.proc = None
        self.port = None

    def start(self, wait=True):
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command_prefix + [binary("allreduced")] + self.flags,
                                     stdout=self.log,
                                     stderr=subprocess.STDOUT, env=self.env)
        if wait:
            self.wait_serving()
        return self

    def wait_serving(self, timeout_s=15):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n"
                                     + self.read_log())
            try:
                with open(self.port_file) as f:
                    text = f.read()
                return text.endswith("\n") and int(text)
            except (OSError, ValueError):
                return None
        self.port = wait_until(ready, timeout_s, f"{self.name} to write its port file")
        return self.port

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def signal(self, signo):
        self.proc.send_signal(signo)

    def wait_exit(self, timeout_s=15):
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit within {timeout_s}s:\n"
                                 + self.read_log())

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test stopped it
            self.proc.kill()
            self.proc.wait()

    def read_log(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()


class Cluster:
    """A coordinator plus followers on loopback; stops everything it started."""

    def __init__(self, heartbeat_ms=100, host_timeout_ms=1000):
        self.workdir = tempfile.mkdtemp(prefix="ard-it.", dir="/tmp")
        self.heartbeat_ms = heartbeat_ms
        self.host_timeout_ms = host_timeout_ms
        self.daemons = {}

    def add(self, name, coordinator=True, **kwargs):
        """Starts a daemon; the first one added is the coordinator."""
        coord = None
        if self.daemons and coordinator:
            coord = next(iter(self.daemons.values())).address
        d = Daemon(self.workdir, name, coordinator=coord, heartbeat_ms=self.heartbeat_ms,
                   host_timeout_ms=self.host_timeout_ms, **kwargs)
        self.daemons[name] = d
        return d.start()

    def close(self):
        for d in self.daemons.values():
            d.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self):
        return "\n".join(f"--- {n}\n{d.read_log()}" for n, d in self.daemons.items() if d.proc)


def ctl(*args, timeout_s=20):
    """Runs allreducectl; returns CompletedProcess with text stdout/stderr."""
    return subprocess.run([binary("allreducectl")] + list(args), capture_output=True, text=True,
                          timeout=timeout_s)


def status_json(daemon_address):
    """`allreducectl status --json` parsed, or None when the call fails (exit 3, some host DOWN,
    still has the cluster view)."""
    r = ctl("--daemon", daemon_address, "--timeout_ms", "2000", "status", "--json")
    if r.returncode not in (0, 3):
        return None
    return json.loads(r.stdout)


def host_states(daemon_address):
    status = status_json(daemon_address)
    if status is None:
        return None
    return {h["name"]: h for h in status["hosts"]}


class Workers:
    """`size` collective_worker processes of one job on one daemon, started by allreduced.launch's
    RankGroup (ranks from ALLREDUCED_* unless `env_for_rank(rank)` provides another launcher's
    variables); procs[i] is rank i's Popen, its output a text pipe. job=None: no ALLREDUCED_JOB,
    the client library names the job from the launcher's variables. `sockets` (instead of
    socket_path): `size` processes on each of several daemons; `extra_env` may be a function of
    the rank's launch.Slot."""

    def __init__(self, socket_path, job, size, mode, seed=12345, env_for_rank=None, extra_env=None,
                 *, sockets=None, give_rank=True):
        hook = None
        if env_for_rank is not None:
            job_env = {} if job is None else {"ALLREDUCED_JOB": job}
            hook = lambda slot: dict(job_env, **env_for_rank(slot.rank))  # noqa: E731
        self.group = RankGroup(sockets or [socket_path], size,
                               [binary("collective_worker"), mode, str(seed)], job=job,
                               env=extra_env, env_for_rank=hook, give_rank=give_rank, text=True)
        self.procs = self.group.procs

    def wait(self, timeout_s=120):
        """Returns (returncode, output lines) per process of `procs` (a test may leave some out);
        kills stragglers after timeout_s."""
        ranks = [self.group.procs.index(p) for p in self.procs]
        chunks = {rank: [] for rank in ranks}
        self.group.read_lines(lambda rank, line: chunks[rank].append(line), ranks)
        self.group.wait(timeout_s=timeout_s, ranks=ranks)
        results = []
        for rank in ranks:
            lines = "".join(chunks[rank]).splitlines()
            if rank in self.group.timed_out:
                lines.append("KILLED: timed out")
            results.append((self.group.procs[rank].returncode, lines))
        return results

    def kill(self):
        self.group.kill()


class WatchedJob:
    """A RankGroup of `per_host` processes of `command` on each daemon socket (text output, kept
    as lines per start rank), for tests that act when a rank printed a line (the elastic tests
    kill a host once rank 0 reached a step). `env`: the processes' extra variables."""

    def __init__(self, sockets, per_host, command, job, env, give_rank=True):
        self.lines = [[] for _ in range(len(sockets) * per_host)]
        self.seen = threading.Condition()
        self.group = RankGroup(sockets, per_host, command, job=job, env=env, text=True,
                               on_line=self._on_line, give_rank=give_rank)

    def _on_line(self, rank, line):
        with self.seen:
            self.lines[rank].append(line.rstrip("\n"))
            self.seen.notify_all()

    def wait_line(self, rank, prefix, timeout_s=300):
        """Returns once `rank` printed a line starting with `prefix` (fails after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        with self.seen:
            while not any(line.startswith(prefix) for line in self.lines[rank]):
                left = deadline - time.monotonic()
                assert left > 0, f"no '{prefix}' from rank {rank}:\n" + self.output()
                self.seen.wait(left)

    def line(self, rank, prefix):
        """The first line of `rank` that starts with `prefix`."""
        found = [line for line in self.lines[rank] if line.startswith(prefix)]
        assert found, f"no '{prefix}' from rank {rank}:\n" + self.output()
        return found[0]

    def wait(self, timeout_s=400):
        """Every process's return code, once all ended (stragglers killed after timeout_s)."""
        self.group.wait(timeout_s=timeout_s)
        return [p.returncode for p in self.group.procs]

    def output(self):
        return "\n".join(f"--- rank {r}\n" + "\n".join(ls) for r, ls in enumerate(self.lines))


def group_outputs(group, timeout_s=180):
    """(returncode, output text) of every process of a RankGroup started with text=True; one still
    running after timeout_s is killed and its output ends with "KILLED: timed out"."""
    chunks = [[] for _ in group.procs]
    group.read_lines(lambda rank, line: chunks[rank].append(line))
    group.wait(timeout_s=timeout_s)
    return [(p.returncode, "".join(chunks[rank])
             + ("\nKILLED: timed out" if rank in group.timed_out else ""))
            for rank, p in enumerate(group.procs)]


def lines_with(output_lines, prefix):
    return [line for line in output_lines if line.startswith(prefix)]


def workers_across(sockets, job, per_host, mode, seed=12345, extra_env=None, host_env=None):
    """`per_host` collective_worker processes on each daemon socket, forming one job of
    len(sockets) * per_host ranks. They carry no ALLREDUCED_RANK: the daemons assign ranks (host
    order, then local rank). `host_env`: more variables for the processes of each socket, in the
    order of `sockets`."""
    def env(slot):
        return dict(extra_env or {}, **(host_env[slot.socket_index] if host_env else {}))
    return Workers(None, job, per_host, mode, seed=seed, extra_env=env, sockets=sockets,
                   give_rank=False)


def metrics_port(daemon):
    """The port from the daemon's "metrics serving ... port=N" log line."""
    def find():
        m = re.search(r"metrics serving address=\S+ port=(\d+)", daemon.read_log())
        return m and int(m.group(1))
    return wait_until(find, 10, f"{daemon.name}'s metrics port")


def scrape(daemon):
    """{(name, frozenset(labels.items())): value} of every sample of the daemon's /metrics (its
    metrics_address must be set), parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    url = f"http://127.0.0.1:{metrics_port(daemon)}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def check_adasum(results):
    """Adasum's cases matched the reference on every rank (the worker checks), bit-identical across
    ranks; its refusals failed on every rank with INVALID_ARGUMENT naming the reason."""
    for rank, (rc, out) in enumerate(results):
        assert rc == 0 and lines_with(out, "DONE") and not lines_with(out, "MISMATCH"), \
            f"rank {rank} exited {rc}:\n" + "\n".join(out)
    per_rank = [dict(line.split()[1:3] for line in lines_with(out, "RESULT")) for _, out in results]
    assert len(per_rank[0]) >= 10
    for case in per_rank[0]:
        assert len({r[case] for r in per_rank}) == 1, case
    for _, out in results:
        integer = lines_with(out, "ERROR adasum_refused.int32")[0]
        assert integer.split()[2] == "3", integer
        assert integer.endswith("it needs float16, float32 or float64, not int32."), integer
        scatter = lines_with(out, "ERROR adasum_refused.reducescatter")[0]
        assert scatter.split()[2] == "3", scatter
        assert "REDUCESCATTER does not support it" in scatter, scatter
    return per_rank[0]  # case -> result hash
