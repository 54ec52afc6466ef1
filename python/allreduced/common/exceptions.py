"""Horovod's error types, defined once for every framework binding."""


class HorovodInternalError(RuntimeError):
    """A collective failed (the job lost a rank or host, or the ranks' tensors disagree);
    recoverable in elastic training (the state is restored to its last commit)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Ranks wait to join the elastic job: it re-forms without restoring the state.
    `skip_sync`: the state need not be synced afterwards."""

    def __init__(self, skip_sync=False):
        super().__init__("allreduced: ranks wait to join the elastic job; re-forming")
        self.skip_sync = skip_sync
