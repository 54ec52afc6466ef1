"""The framework-neutral core of elastic training (Horovod's hvd.elastic): the State protocol,
ObjectState (plain Python objects), and run_fn, the retry loop a framework's `run` decorator is
built on. A framework binding supplies what needs its collectives: how to broadcast an object,
the rank, how all ranks agree that ranks wait to join, and how to leave and re-join the job.
$ALLREDUCED_ELASTIC_RESET_LIMIT bounds the resets (0 or unset: no bound).
"""
import functools
import os
import queue

from allreduced.common import launch_notice
from allreduced.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


class State:
    """Training state kept in memory on every rank: `commit` saves it (and checks for joining
    ranks), `restore` goes back to the last commit, `sync` gives every rank rank 0's state.
    `hosts_updated(local)`: a function that returns True on every rank at once (a collective)
    when ranks wait to join or some rank passed local=True; None: never.

    Horovod's semi-private parts that elastic scripts use are here too: on_hosts_updated(timestamp,
    result) queues a host update in `_host_messages` (Horovod's driver calls it; scripts and
    tests do too), which interrupts the next commit or check_host_updates() on every rank;
    `_last_updated_timestamp` is the newest one seen."""

    def __init__(self, bcast_object, get_rank, hosts_updated=None):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._hosts_updated = hosts_updated
        self._reset_callbacks = []
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        launch_notice.watch(self)

    def register_reset_callbacks(self, callbacks):
        """Functions to call after each reset (e.g. to scale the learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Queues a host update: the next commit or check_host_updates() interrupts."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state, then raises HostsUpdatedInterrupt if ranks wait to join."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank at once when ranks wait to join, a host
        update was queued on some rank, or the launcher announced new workers to some rank."""
        launch_notice.poll()
        local = False
        while not self._host_messages.empty():
            timestamp, _ = self._host_messages.get()
            if timestamp > self._last_updated_timestamp:
                self._last_updated_timestamp = timestamp
                local = True
        if self._hosts_updated is not None and self._hosts_updated(local):
            raise HostsUpdatedInterrupt(False)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the state is synced."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and exposed as attributes."""

    def __init__(self, bcast_object, get_rank, hosts_updated=None, **kwargs):
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         hosts_updated=hosts_updated)

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)


def reset_limit():
    """$ALLREDUCED_ELASTIC_RESET_LIMIT: how many resets `run_fn` allows (0: no bound)."""
    value = os.environ.get("ALLREDUCED_ELASTIC_RESET_LIMIT", "")
    return int(value) if value else 0


def rejoin(basics):
    """The reset every binding does: leaves the generation that ended and registers for the next
    one, keeping this process's place in rank order, once the launcher caught up with the loss
    (it stops the workers of a host it blacklists) and the workers it announced reached init()
    too (one re-formation takes them). `basics`: the binding's module (rank,
    is_initialized, shutdown, init)."""
    order = basics.rank() if basics.is_initialized() else None
    basics.shutdown()
    launch_notice.wait_for_launcher()
    launch_notice.wait_for_new_workers()
    if order is not None and order >= 0:
        os.environ["ALLREDUCED_ELASTIC_ORDER"] = str(order)
    basics.init()


def run_fn(func, reset, recoverable=lambda error: False, daemon_hosts_updated=None):
    """Wraps the training function `func(state, ...)`: syncs `state` from rank 0, runs `func`,
    and on a lost rank (HorovodInternalError, or an exception `recoverable` accepts: a framework's
    own error type) restores the last commit, calls `reset()` (leave the job and re-join it) and
    runs it again; on joining ranks (HostsUpdatedInterrupt) resets and runs it again (once the
    daemon holds the new ranks: `daemon_hosts_updated`, the binding's flag, see
    launch_notice.wait_for_registration). Stops with RuntimeError after reset_limit() resets."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        resets = 0
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
                launch_notice.wait_for_registration(daemon_hosts_updated)
            except Exception as error:  # noqa: BLE001 (HorovodInternalError or recoverable)
                if not isinstance(error, HorovodInternalError) and not recoverable(error):
                    launch_notice.failed()
                    raise
                state.restore()
                skip_sync = False
            resets += 1
            limit = reset_limit()
            if limit and resets > limit:
                raise RuntimeError(f"allreduced: elastic job reached its reset limit of {limit} "
                                   "(ALLREDUCED_ELASTIC_RESET_LIMIT); stopping")
            reset()
            state.on_reset()

    return wrapper
