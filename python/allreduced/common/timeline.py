"""Horovod's timeline for allreduced (docs/operator-guide.md "Timeline"): HOROVOD_TIMELINE=path
and start_timeline(path)/stop_timeline() record the whole job, every host, as a Chrome trace.

Rank 0 runs `allreducectl timeline --job JOB -o PATH` as a child process and stops it (SIGINT) at
stop_timeline() or exit; allreducectl asks every host's daemon over gRPC and writes the file. So
the file is written by the user's own process (the daemon, hardened under systemd, never opens a
user's path) and the client library stays free of gRPC. allreducectl comes from $ALLREDUCECTL or
PATH, the daemon address from $ALLREDUCED_DAEMON (else allreducectl's default). No TensorFlow here.
"""
import os
import signal
import subprocess

from allreduced.launch.hosts import find_allreducectl


class TimelineError(RuntimeError):
    pass


class Recording:
    """One `allreducectl timeline` run: recording once the constructor returns."""

    def __init__(self, path, job, allreducectl=None, daemon=None):
        command = [find_allreducectl(allreducectl)]
        daemon = daemon or os.environ.get("ALLREDUCED_DAEMON")
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
    """HOROVOD_TIMELINE=path: rank 0 records the job from here until stop() or exit.
    HOROVOD_TIMELINE=DYNAMIC (Horovod: recorded only between start_timeline and stop_timeline)
    records nothing here."""
    path = os.environ.get("HOROVOD_TIMELINE")
    if not path or path == "DYNAMIC" or rank != 0 or _active[0] is not None:
        return False
    start(path, job)
    return True
