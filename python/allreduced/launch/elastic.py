"""The launcher's elastic mode (--min-np/--max-np): which hosts may run workers (the cluster view
or a --host-discovery-script, asked again every few seconds), which of their slots are taken, which
hosts are blacklisted after repeated failures, and the loop that starts a worker in every free slot
up to max_np while the job runs. SlotTable and parse_discovery are pure; run() owns the workers and
runs on the launcher's main thread (output is copied by RankGroup's reader threads). Standard
library only.
"""
import collections
import subprocess
import time

from allreduced.launch import hosts as hosts_lib
from allreduced.launch.rank_group import RankGroup

# A host whose workers failed this many times within FAILURE_WINDOW_S gets no worker for
# COOL_DOWN_S.
FAILURE_LIMIT = 3
FAILURE_WINDOW_S = 60.0
COOL_DOWN_S = 120.0
DISCOVERY_INTERVAL_S = 1.0  # horovodrun asks its discovery script every second
_POLL_S = 0.1

HostError = hosts_lib.HostError


def parse_discovery(text, where="host discovery script"):
    """A discovery script's output: one `host:slots` line per available host (blank lines are
    skipped) as Hosts in that order, socket unknown. A bad line raises HostError naming it."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        name, sep, count = line.rpartition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1 or " " in name:
            raise HostError(f"{where}, line {number}: expected 'host:slots' (slots >= 1), got "
                            f"{line!r}")
        hosts.append(hosts_lib.Host(name, int(count), None, hosts_lib.is_local(name)))
    return hosts_lib._unique(hosts)


def run_discovery_script(path, timeout_s=30):
    """Runs the --host-discovery-script and parses its output (parse_discovery)."""
    try:
        r = subprocess.run([path], capture_output=True, text=True, timeout=timeout_s)
    except OSError as e:
        raise HostError(f"cannot run host discovery script {path}: {e.strerror}")
    except subprocess.TimeoutExpired:
        raise HostError(f"host discovery script {path} took over {timeout_s}s")
    if r.returncode != 0:
        why = r.stderr.strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise HostError(f"host discovery script {path} failed: {why[0]}")
    return parse_discovery(r.stdout, f"host discovery script {path}")


class SlotTable:
    """The hosts available to an elastic job and the workers placed on them.

    update(hosts) replaces the available hosts (a host that is gone keeps its running workers but
    gets no new one); free(now) lists the slots a new worker may take, hosts in order, blacklisted
    hosts left out; take(host) and release(host, failed, now) count a host's workers; a host
    with FAILURE_LIMIT failures within FAILURE_WINDOW_S is blacklisted for COOL_DOWN_S.
    """

    def __init__(self, failure_limit=FAILURE_LIMIT, window_s=FAILURE_WINDOW_S,
                 cool_down_s=COOL_DOWN_S):
        self.hosts = []  # Host, in discovery order
        self.used = collections.Counter()  # host name: workers running there
        self._failures = collections.defaultdict(list)  # host name: times of failures
        self._blacklisted_until = {}
        self.failure_limit, self.window_s, self.cool_down_s = failure_limit, window_s, cool_down_s

    def update(self, hosts):
        self.hosts = list(hosts)

    def blacklisted(self, name, now):
        return self._blacklisted_until.get(name, 0) > now

    def free(self, now):
        """[(Host, local_rank)]: every free slot of the available hosts not blacklisted."""
        out = []
        for h in self.hosts:
            if not self.blacklisted(h.name, now):
                out += [(h, i) for i in range(self.used[h.name], h.slots)]
        return out

    def take(self, name):
        self.used[name] += 1

    def release(self, name, failed, now):
        """A worker on `name` exited; returns True if that blacklisted the host."""
        self.used[name] -= 1
        if not failed:
            return False
        times = [t for t in self._failures[name] if now - t < self.window_s] + [now]
        self._failures[name] = times
        if len(times) >= self.failure_limit:
            self._blacklisted_until[name] = now + self.cool_down_s
            self._failures[name] = []
            return True
        return False


class _Worker:
    """One started worker: its single-rank RankGroup, its host and its launch number."""

    def __init__(self, group, host, number):
        self.group, self.host, self.number = group, host, number


def run(table, discover, command, np, max_np, elastic_env, start_options, log, workers, signals,
        interval_s=DISCOVERY_INTERVAL_S):
    """Starts `np` workers in table's free slots, then keeps the job at up to `max_np` workers:
    a worker that fails frees its slot and a new worker is started in a free one (a host that is
    blacklisted gets none; the free slots found together start together, a host's sharing one
    ALLREDUCED_LOCAL_SIZE) while some worker still runs and none has finished; `discover()`
    (returning Hosts with sockets, or raising HostError) is asked again every interval_s.
    Returns the exit code once every worker has exited: 0 when a worker finished the job (exited
    0), whatever workers exit after it, else the last failure's code. `workers`: an empty list, holding the running _Workers, for the
    caller to stop them on a signal; `signals`: the caller's signal state (cli._Signals: a
    `starting` flag its handler heeds, check() raising for a signal held meanwhile).
    log(number, line) gets a worker's output lines, and the launcher's own (number None).
    Raises HostError when the hosts cannot hold `np` workers."""
    number = [0]
    finished = [False]  # a worker exited 0: the job is ending, no new worker

    def start(slot):
        # A signal's handler raises only outside here (signals.starting), so that every started
        # worker is in `workers` to be stopped; signals.check() raises after.
        signals.starting = True
        try:
            group = RankGroup.of_slots([slot], command, env=elastic_env,
                                       on_line=lambda _r, line, n=number[0]: log(n, line),
                                       **start_options)
            table.take(slot.host)
            workers.append(_Worker(group, slot.host, number[0]))
            number[0] += 1
        finally:
            signals.starting = False
        signals.check()

    # The first workers as a plain launch numbers them: host-major, each host's LOCAL_SIZE the
    # count a new job's first generation waits for there.
    now = time.monotonic()
    for slot in hosts_lib.assign([h for h in table.hosts if not table.blacklisted(h.name, now)],
                                 np):
        start(slot)
    code = 0
    asked_at = time.monotonic()
    while workers:
        time.sleep(_POLL_S)
        now = time.monotonic()
        for w in list(workers):
            if w.group.running():
                continue
            w.group.wait()
            rc = w.group.procs[0].returncode
            workers.remove(w)
            # Once a worker finished the job, a later failure (a replacement on a host that died,
            # which never joined) does not undo it.
            if not finished[0]:
                code = rc if rc > 0 else (128 - rc if rc < 0 else 0)
            if rc == 0:
                finished[0] = True
            if rc != 0:
                log(None, f"worker {w.number} on {w.host} exited with {rc}\n".encode())
            if table.release(w.host, rc != 0, now):
                log(None, f"host {w.host} blacklisted for {table.cool_down_s:.0f}s after "
                    f"{table.failure_limit} failures\n".encode())
        if now - asked_at >= interval_s:
            asked_at = now
            try:
                table.update(discover())
            except HostError as e:
                log(None, f"host discovery: {e} (keeping the previous hosts)\n".encode())
        if workers and not finished[0] and len(workers) < max_np:
            batch = table.free(now)[:max_np - len(workers)]
            for h, _ in batch:
                if not h.socket:
                    raise HostError(f"host {h.name}: its daemon's socket is not known; give it "
                                    "with --socket")
            # Started together, last in rank order: they join the running job at its next
            # commit. Each host's new workers share one LOCAL_SIZE (its workers once they run),
            # which a host new to the job waits for, so one re-formation takes them all.
            size = len(workers) + len(batch)
            local_size = collections.Counter(h.name for h, _ in batch)
            for name in local_size:
                local_size[name] += table.used[name]
            for h, local in batch:
                start(hosts_lib.Slot(len(workers), size, 0, h.name, h.socket, local,
                                     local_size[h.name], h.local))
                log(None, f"started worker {number[0] - 1} on {h.name}\n".encode())
    return code
