"""Process sets: collectives among a subset of the job's ranks, like Horovod's ProcessSet.

Each set is added collectively (every rank of the job calls add_process_set in the same order);
its members open one more connection to their daemon and form a sub-job "<job>.ps<id>", so the
daemon negotiates and reduces among the members only (Average divides by the set's size).
Non-members keep no state for it beyond the ProcessSet object."""
from allreduced.torch import basics


class ProcessSet:
    """A subset of ranks. `ranks` sorted; `process_set_id` assigned when added."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"process set ranks must be distinct: {ranks}")
        self.process_set_id = None

    def _require_added(self):
        if self.process_set_id is None:
            raise ValueError("process set is not registered: pass it to init(process_sets=...) "
                             "or add_process_set()")

    def included(self):
        self._require_added()
        return self.process_set_id == 0 or basics.rank() in self.ranks

    def rank(self):
        self._require_added()
        if self.process_set_id == 0:
            return basics.rank()
        return self.ranks.index(basics.rank()) if self.included() else -1

    def size(self):
        self._require_added()
        return basics.size() if self.process_set_id == 0 else len(self.ranks)

    def __eq__(self, other):
        return (isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id
                and self.ranks == other.ranks)

    def __hash__(self):
        return hash((self.process_set_id, tuple(self.ranks or ())))

    def __repr__(self):
        if self.process_set_id == 0:
            return "ProcessSet(process_set_id=0, ranks=all)"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        self.ranks = None
        self.process_set_id = 0


global_process_set = _GlobalProcessSet()
_added = {}  # id -> ProcessSet
_next_id = [1]


def forget_all():
    for ps in _added.values():
        ps.process_set_id = None
    _added.clear()
    _next_id[0] = 1


def add_process_set(process_set):
    """Adds a ProcessSet (or a list of ranks); every rank of the job must call this, in the same
    order. Returns the ProcessSet."""
    from allreduced.torch.collectives import allgather_sizes
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps} is already registered")
    size = basics.size()
    if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= size:
        raise ValueError(f"process set ranks {ps.ranks} must be in [0, {size})")
    for other in _added.values():
        if other.ranks == ps.ranks:
            raise ValueError(f"a process set with ranks {ps.ranks} is already registered: {other}")
    ps_id = _next_id[0]
    # Which host holds each rank, so members know their local rank and size within the set.
    hosts = allgather_sizes(basics.cross_rank(), f"process_set.{ps_id}.hosts")
    _next_id[0] += 1
    me = basics.rank()
    if me in ps.ranks:
        local = [r for r in ps.ranks if hosts[r] == hosts[me]]
        basics.add_connection(ps_id, ps.ranks.index(me), len(ps.ranks), local.index(me),
                              len(local))
    ps.process_set_id = ps_id
    _added[ps_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a process set (collectively). True when it was added."""
    ps_id = process_set.process_set_id
    if not ps_id or _added.get(ps_id) is not process_set:
        return False
    basics.remove_connection(ps_id)
    del _added[ps_id]
    process_set.process_set_id = None
    return True


def process_set_id(process_set):
    """The id of `process_set`; raises ValueError when this rank is not a member."""
    if process_set is None or process_set is global_process_set:
        return 0
    process_set._require_added()
    if not process_set.included():
        raise ValueError(f"rank {basics.rank()} is not a member of {process_set}")
    return process_set.process_set_id
