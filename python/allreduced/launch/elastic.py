"""The launcher's elastic mode, its pure parts: which hosts may run workers (a
--host-discovery-script's output, parsed here, or the cluster view), which of their slots are
taken, and which hosts are blacklisted: a host where a worker failed gets no worker, for good or,
with a cooldown range, for a cooldown that doubles with each blacklisting (capped, jittered) as
Horovod's --blacklist-cooldown-range. The loop that runs the workers is elastic_run.py. Standard
library only.
"""
import collections
import math
import random
import subprocess

from allreduced.launch import hosts as hosts_lib

DISCOVERY_INTERVAL_S = 1.0  # horovodrun asks its discovery script every second

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


def cooldown_s(blacklistings, low, high, jitter):
    """How long a host stays blacklisted the n-th time (n = blacklistings >= 1): low seconds,
    doubled for each earlier blacklisting, plus up to `low` of jitter (jitter in [0, 1)), never
    over `high` nor under `low`."""
    grown = low * 2 ** min(blacklistings - 1, 62) + jitter * low
    return max(low, min(high, grown))


class SlotTable:
    """The hosts available to an elastic job and the workers placed on them.

    update(hosts) replaces the available hosts; gone() names the hosts that still run workers but
    are no longer available (their workers are to stop); free(now) lists the slots a new worker
    may take, hosts in order, blacklisted hosts left out; take(host) and release(host) count a
    host's workers; blacklist(host, now) takes a host out: for good with no cooldown_range, else
    for cooldown_s() of its blacklistings so far, after which it is available again.
    """

    def __init__(self, cooldown_range=None, jitter=random.random):
        self.hosts = []  # Host, in discovery order
        self.used = collections.Counter()  # host name: workers running there
        self._blacklistings = collections.Counter()
        self._blacklisted_until = {}
        self.cooldown_range = cooldown_range
        self._jitter = jitter

    def update(self, hosts):
        self.hosts = list(hosts)

    def gone(self):
        listed = {h.name for h in self.hosts}
        return [name for name, n in self.used.items() if n > 0 and name not in listed]

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

    def release(self, name):
        self.used[name] -= 1

    def blacklist(self, name, now):
        """Blacklists `name` (a no-op while it is); returns its cooldown in seconds (math.inf:
        for good), or None when it already was."""
        if self.blacklisted(name, now):
            return None
        self._blacklistings[name] += 1
        if self.cooldown_range is None:
            period = math.inf
        else:
            period = cooldown_s(self._blacklistings[name], *self.cooldown_range, self._jitter())
        self._blacklisted_until[name] = now + period
        return period
