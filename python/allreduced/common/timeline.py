"""Horovod's timeline for allreduced (docs/operator-guide.md "Timeline"): HOROVOD_TIMELINE=path
and start_timeline(path)/stop_timeline() record the whole job, every host, as a Chrome trace.

Rank 0 runs `allreducectl timeline --job JOB -o PATH` as a child process and stops it (SIGINT) at
stop_timeline() or exit; allreducectl asks every host's daemon over gRPC and writes the file. So
the file is written by the user's own process (the daemon, hardened under systemd, never opens a
user's path) and the client library stays free of gRPC. allreducectl comes from $ALLREDUCECTL,
PATH, or beside the daemon; the daemon's address from $ALLREDUCED_DAEMON, else from the daemon
itself: the process at the other end of the trainer's socket ($ALLREDUCED_SOCKET), its
--cluster_address (or --port_file). With HOROVOD_TIMELINE, a timeline that cannot start is a
warning; training goes on. No TensorFlow here.
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import warnings

from allreduced.launch.hosts import HostError, find_allreducectl

DEFAULT_SOCKET = "/run/allreduced/allreduced.sock"  # the client library's default


class TimelineError(RuntimeError):
    pass


class Recording:
    """One `allreducectl timeline` run: recording once the constructor returns."""

    def __init__(self, path, job, allreducectl=None, daemon=None):
        allreducectl = (allreducectl or os.environ.get("ALLREDUCECTL")
                        or shutil.which("allreducectl"))
        daemon = daemon or os.environ.get("ALLREDUCED_DAEMON")
        found = {} if allreducectl and daemon else daemon_of_socket(
            os.environ.get("ALLREDUCED_SOCKET") or DEFAULT_SOCKET)
        try:
            command = [find_allreducectl(allreducectl or found.get("allreducectl"))]
        except HostError as e:
            raise TimelineError(str(e))
        daemon = daemon or found.get("address")
        if daemon:
            command += ["--daemon", daemon]
        command += ["timeline", "--job", job, "-o", os.path.abspath(path)]
        try:
            self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True)
        except OSError as e:
            raise TimelineError(f"cannot run {command[0]}: {e.strerror}")
        first = self._proc.stderr.readline()  # "recording job ..." once every host records
        if not first.startswith("recording"):
            rest = first + self._proc.stderr.read()
            self._proc.wait()
            raise TimelineError(f"timeline not started: {rest.strip()}")
        self.path = path

    def stop(self, timeout_s=120):
        """Stops recording and waits until the trace is written; raises if it was not."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        try:
            rest = self._proc.stderr.read()
            rc = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            raise TimelineError(f"allreducectl timeline took over {timeout_s}s to write {self.path}")
        if rc != 0:
            raise TimelineError(f"timeline {self.path}: {rest.strip()}")


_active = [None]


def start(path, job):
    """Starts recording `job` into `path` (a running recording is stopped and written first)."""
    stop()
    _active[0] = Recording(path, job)


def stop():
    """Stops the running recording, if any, and writes its file."""
    recording, _active[0] = _active[0], None
    if recording is not None:
        recording.stop()


def start_from_env(rank, job):
    """HOROVOD_TIMELINE=path: rank 0 records the job from here until stop() or exit; one that
    cannot start is a warning. HOROVOD_TIMELINE=DYNAMIC (Horovod: recorded only between
    start_timeline and stop_timeline) records nothing here."""
    path = os.environ.get("HOROVOD_TIMELINE")
    if not path or path == "DYNAMIC" or rank != 0 or _active[0] is not None:
        return False
    try:
        start(path, job)
    except TimelineError as e:
        warnings.warn(f"allreduced: HOROVOD_TIMELINE={path}: {e}; training goes on without it",
                      RuntimeWarning, stacklevel=2)
        return False
    return True


def daemon_of_socket(path):
    """What the daemon listening on the local socket `path` tells of itself through its process
    (the socket's peer, SO_PEERCRED, and /proc): {"address": its gRPC HOST:PORT,
    "allreducectl": one installed beside it}, each key only when found."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:  # the daemon's kind
            s.settimeout(2)
            s.connect(path)
            pid, _, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return {}
    found = {}
    flags = _flags(argv[1:])
    address = flags.get("cluster_address", "0.0.0.0:7070")  # allreduced's default
    host, _, port = address.rpartition(":")
    if port == "0" and flags.get("port_file"):
        try:
            with open(flags["port_file"]) as f:
                port = f.read().strip()
        except OSError:
            port = ""
    if port.isdigit() and port != "0":
        found["address"] = f"{'127.0.0.1' if host in ('0.0.0.0', '', '[::]') else host}:{port}"
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = shutil.which(argv[0]) if argv else None
    for candidate in ([os.path.join(os.path.dirname(exe), "allreducectl"),
                       os.path.join(os.path.dirname(exe), "..", "ctl", "allreducectl")]
                      if exe else []):
        if os.access(candidate, os.X_OK):
            found["allreducectl"] = os.path.normpath(candidate)
            break
    return found


def _flags(args):
    """--name=value and --name value pairs of a command line."""
    out = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            if not sep and i + 1 < len(args) and not args[i + 1].startswith("--"):
                value = args[i + 1]
            out[name] = value
    return out
