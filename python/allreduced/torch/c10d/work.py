"""c10d Work objects for the allreduced backend, and the thread that completes them.

c10d's callers (DistributedDataParallel's reducer among them) wait on a Work's future without
ever calling wait(), so something must complete it: one completion thread per process group
waits for each submitted operation in submission order (the order c10d issues them in, the same
on every rank), copies the results into the output tensors, and completes the Work's future
with them (or with the error). Work.wait() only waits for that.
"""
import datetime
import queue
import threading

import torch
import torch.distributed as dist

from allreduced.common.exceptions import HorovodInternalError


class Work(dist._Work):
    """One c10d collective in flight; its future's value is the list of output tensors."""

    def __init__(self, what):
        super().__init__()
        self._what = what
        self._done = threading.Event()
        self._error = None
        self._future = torch.futures.Future()

    def complete(self, value=None, error=None):
        """From the completion thread: the op finished with `value` or failed with `error`."""
        self._error = error
        self._done.set()
        if error is None:
            self._future.set_result(value)
        else:
            self._future.set_exception(error)

    def wait(self, timeout=None):
        seconds = None
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            seconds = timeout.total_seconds()
        if not self._done.wait(seconds):
            raise RuntimeError(f"allreduced: {self._what} did not complete within {timeout}")
        if self._error is not None:
            raise self._error
        return True

    def get_future(self):
        return self._future


class Completer:
    """The completion thread of one process group.

    Lifecycle: 1. Completer(name) starts the thread; 2. add(operation, work) from the thread
    that issues collectives queues an allreduced.torch.requests.Operation and its Work;
    3. stop() lets the thread finish what was queued and joins it (before the client closes)."""

    _STOP = object()

    def __init__(self, name):
        self._queue = queue.Queue()
        # A daemon thread, so a script that never destroys its process group still exits; the
        # backend's shutdown (destroy_process_group, or exit) stops and joins it.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, operation, work):
        self._queue.put((operation, work))

    def stop(self):
        if self._thread.is_alive():
            self._queue.put(self._STOP)
            self._thread.join()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            operation, work = item
            try:
                value = operation.wait()
            except HorovodInternalError as error:  # the job failed: c10d's backend error
                work.complete(error=dist.DistBackendError(f"allreduced: {error}"))
            except Exception as error:  # every failure goes to the Work, none is dropped
                work.complete(error=error)
            else:
                work.complete(value=value)
