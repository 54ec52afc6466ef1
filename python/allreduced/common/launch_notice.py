"""The elastic launcher's notices to its workers on this machine, through files in a directory
($ALLREDUCED_ELASTIC_NOTICE; the launcher's elastic_run.Notices writes them): it announces new
workers the moment it starts them, so that the running ranks interrupt at their next commit
(HostsUpdatedInterrupt) instead of seconds later when the new workers have imported their
framework and reached their daemon; and the running ranks, re-registering, wait until those
workers reach init() too, so that one re-formation takes them all (horovodrun's rendezvous waits
for its new workers the same way). Workers on other machines get no directory: for them the
daemon's own notice (a new rank's HELLO) is the only one. Framework-neutral; one watcher
thread per process, started by the first elastic State.

Files in the directory:
- `hosts`: one line per change the launcher made while the job ran, rewritten whole (write, then
  rename): "added <n>,<n>..." (the launch numbers of the workers it started, increasing) or
  "removed <n>" (it stopped the workers of a host that left; n: the next launch number then);
- `arrived.<n>`: worker n reached init() (it writes it, just before registering);
- `exited.<n>`: worker n exited (the launcher writes it), so nobody waits for it;
- `failed.<n>`: worker n's training failed (it writes it as the error leaves hvd.elastic.run,
  before its exit, which may take seconds): the launcher blacklists its host at once;
- `polls`: how many times the launcher has looked at the workers; a rank that lost a peer waits
  for two more (the launcher saw the loss and stopped what it stops) before it re-registers.
Each worker knows its own launch number ($ALLREDUCED_ELASTIC_WORKER): a line about workers
started after it, or written after it started, is news to it; an earlier one is not. News reaches
every elastic State of the process as Horovod's driver notices do (State.on_hosts_updated, with
Horovod's HostUpdateResult values), from a watcher thread and at each check_host_updates().
"""
import os
import threading
import time
import weakref

# How long a re-registering rank waits for announced workers to reach init() before it goes on
# without them (they then join at the re-formation after; a worker that exits stops the wait).
ARRIVAL_TIMEOUT_S = 120.0
_POLL_S = 0.05

WATCH_INTERVAL_S = 0.2
# How long a rank that lost a peer waits for the launcher to look at its workers (a launcher that
# stopped polling is gone). The daemon waits longer for a survivor (kSurvivorWait, 30 s,
# daemon/negotiation/elastic_settle.h): keep it above this.
LAUNCHER_TIMEOUT_S = 10.0
# Horovod's HostUpdateResult values (horovod.runner.elastic.worker), as on_hosts_updated gets.
REMOVED, ADDED = 1, 2

_lock = threading.Lock()
_seen = [0]  # lines of `hosts` already handled by this process
_states = weakref.WeakSet()  # the States news goes to
_watcher = [None]
_failed = [False]
_lines_at_init = [0]  # lines of `hosts` when this process last reached init()


def _directory():
    return os.environ.get("ALLREDUCED_ELASTIC_NOTICE") or None


def _me():
    try:
        return int(os.environ.get("ALLREDUCED_ELASTIC_WORKER", ""))
    except ValueError:
        return None


def _lines(directory):
    """[(kind, [numbers])] of `hosts`, in order ([] while there is none)."""
    try:
        with open(os.path.join(directory, "hosts")) as f:
            text = f.read()
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        kind, _, numbers = line.partition(" ")
        lines.append((kind, [int(n) for n in numbers.split(",") if n.strip().isdigit()]))
    return lines


def _news(directory, me):
    """The HostUpdateResult of each line of `hosts` not handled yet that is news to worker me."""
    lines = _lines(directory)
    news = []
    for kind, numbers in lines[_seen[0]:]:
        if numbers and min(numbers) > me:
            news.append(ADDED if kind == "added" else REMOVED)
    _seen[0] = max(_seen[0], len(lines))
    return news


def poll():
    """Hands the launcher's news to every watched State (on_hosts_updated); also the watcher
    thread's work."""
    directory, me = _directory(), _me()
    if directory is None or me is None:
        return
    with _lock:
        news = _news(directory, me)
        states = list(_states)
    for result in news:
        for state in states:
            state.on_hosts_updated(time.time(), result)


def watch(state):
    """Delivers the launcher's news to `state` from now on (a no-op without the launcher)."""
    if _directory() is None or _me() is None:
        return
    with _lock:
        _states.add(state)
        if _watcher[0] is None:
            _watcher[0] = threading.Thread(target=_watch_loop, name="allreduced-launch-notice",
                                           daemon=True)
            _watcher[0].start()


def _watch_loop():
    while True:
        time.sleep(WATCH_INTERVAL_S)
        poll()


def arrive(timeout_s=ARRIVAL_TIMEOUT_S):
    """Tells the launcher's other workers that this one reached init(), then waits (at most
    timeout_s) for the workers started together with it: they register together, so that their
    daemon counts them in one generation, not one now and one at the next re-formation."""
    _touch("arrived")
    directory, me = _directory(), _me()
    if directory is None or me is None:
        return
    _lines_at_init[0] = len(_lines(directory))
    mine = [numbers for kind, numbers in _lines(directory) if kind == "added" and me in numbers]
    _wait_for(directory, mine[0] if mine else [], timeout_s)


def _touch(what):
    directory, me = _directory(), _me()
    if directory is None or me is None:
        return
    try:
        with open(os.path.join(directory, f"{what}.{me}"), "w"):
            pass
    except OSError:
        pass  # the launcher is gone


def failed():
    """Tells the launcher that this worker's training failed (it is about to exit)."""
    if _directory() is not None and _me() is not None:
        _failed[0] = True
        _touch("failed")


def training_failed():
    """True once failed() told the launcher: the process then exits without a goodbye to its
    daemon (which would count it as a rank coming back to the next generation)."""
    return _failed[0]


def _polls(directory):
    try:
        with open(os.path.join(directory, "polls")) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return None


def wait_for_launcher(timeout_s=LAUNCHER_TIMEOUT_S):
    """Waits until the launcher has looked at its workers twice more (at most timeout_s): a
    worker that failed or a host that left is then blacklisted or stopped, not re-registered."""
    directory = _directory()
    if directory is None or _me() is None:
        return
    start = _polls(directory)
    if start is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = _polls(directory)
        if now is None or now >= start + 2:
            return
        time.sleep(_POLL_S)


def wait_for_registration(daemon_hosts_updated, timeout_s=ARRIVAL_TIMEOUT_S):
    """Before a rank interrupted for new workers leaves its generation: waits (at most timeout_s)
    until its daemon says ranks wait to join (daemon_hosts_updated(), the binding's flag), or
    every worker announced since this process's init() exited. The daemon then holds their
    registration for the next generation, which forms with them; leaving earlier, the ranks
    could re-form before the new ones registered, and again after."""
    directory, me = _directory(), _me()
    if directory is None or me is None or daemon_hosts_updated is None:
        return
    lines = _lines(directory)[_lines_at_init[0]:]
    announced = [n for kind, numbers in lines if kind == "added" for n in numbers if n > me]
    deadline = time.monotonic() + timeout_s
    while announced and not daemon_hosts_updated() and time.monotonic() < deadline:
        announced = [n for n in announced
                     if not os.path.exists(os.path.join(directory, f"exited.{n}"))]
        time.sleep(_POLL_S)


def wait_for_new_workers(timeout_s=ARRIVAL_TIMEOUT_S):
    """Waits until every worker the launcher announced (after this one) reached init() or
    exited, at most timeout_s; returns the numbers still missing then."""
    directory, me = _directory(), _me()
    if directory is None or me is None:
        return []
    added = [n for kind, numbers in _lines(directory) if kind == "added" for n in numbers]
    return _wait_for(directory, [n for n in added if n > me], timeout_s)


def _wait_for(directory, numbers, timeout_s):
    """Waits until each worker of `numbers` arrived or exited, at most timeout_s; returns those
    still missing then."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [n for n in numbers if not any(
            os.path.exists(os.path.join(directory, f"{what}.{n}"))
            for what in ("arrived", "exited"))]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(_POLL_S)
