"""Starts real allreduced daemons and runs allreducectl against them, for integration tests.

Each daemon is one "host": its own host name, loopback port (0: picked by the kernel, read back
from --port_file) and a short local-socket path under a private /tmp directory (Bazel's
TEST_TMPDIR is too long for a Unix socket path).
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time


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
    """`allreducectl status --json` parsed, or None when the call fails."""
    r = ctl("--daemon", daemon_address, "--timeout_ms", "2000", "status", "--json")
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def host_states(daemon_address):
    status = status_json(daemon_address)
    if status is None:
        return None
    return {h["name"]: h for h in status["hosts"]}


class Workers:
    """N collective_worker processes of one job on one daemon (ranks from ALLREDUCED_* unless
    `env_for_rank` provides another launcher's variables). job=None: no ALLREDUCED_JOB, the client
    library names the job from the launcher's variables."""

    def __init__(self, socket_path, job, size, mode, seed=12345, env_for_rank=None, extra_env=None):
        self.procs = []
        for rank in range(size):
            env = dict(os.environ, ALLREDUCED_SOCKET=socket_path)
            if job is None:
                env.pop("ALLREDUCED_JOB", None)
            else:
                env["ALLREDUCED_JOB"] = job
            if env_for_rank is None:
                env.update(ALLREDUCED_RANK=str(rank), ALLREDUCED_SIZE=str(size))
            else:
                env.update(env_for_rank(rank))
            env.update(extra_env or {})
            self.procs.append(subprocess.Popen(
                [binary("collective_worker"), mode, str(seed)], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, env=env))

    def wait(self, timeout_s=120):
        """Returns (returncode, output lines) per process; kills stragglers after timeout_s."""
        results = []
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                out += "\nKILLED: timed out\n"
            results.append((p.returncode, out.splitlines()))
        return results

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def lines_with(output_lines, prefix):
    return [line for line in output_lines if line.startswith(prefix)]


def workers_across(sockets, job, per_host, mode, seed=12345, extra_env=None, host_env=None):
    """`per_host` collective_worker processes on each daemon socket, forming one job of
    len(sockets) * per_host ranks (the daemons assign ranks: host order, then local rank).
    `host_env`: more variables for the processes of each socket, in the order of `sockets`."""
    size = len(sockets) * per_host
    procs = []
    for i, sock in enumerate(sockets):
        env = dict(extra_env or {}, **(host_env[i] if host_env else {}))
        w = Workers(sock, job, per_host, mode, seed=seed, extra_env=env,
                    env_for_rank=lambda l: {"ALLREDUCED_SIZE": str(size),
                                            "ALLREDUCED_LOCAL_SIZE": str(per_host),
                                            "ALLREDUCED_LOCAL_RANK": str(l)})
        procs.extend(w.procs)
    group = Workers.__new__(Workers)
    group.procs = procs
    return group
