"""Process sets (Horovod's ProcessSet): the objects and the registry of a framework binding's
registered sets, framework-neutral. Registering a set takes a collective and the client's own
call, which the binding does between `Registry.prepare` and `Registry.record`."""


class ProcessSet:
    """A subset of ranks. `ranks` sorted; `process_set_id` assigned when registered."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"process set ranks must be distinct: {ranks}")
        self.process_set_id = None
        self._registry = None

    def _require_registered(self):
        if self.process_set_id is None:
            raise ValueError("process set is not registered: pass it to init(process_sets=...) "
                             "or add_process_set()")

    def included(self):
        self._require_registered()
        return self.process_set_id == 0 or self._registry.rank() in self.ranks

    def rank(self):
        self._require_registered()
        if self.process_set_id == 0:
            return self._registry.rank()
        return self.ranks.index(self._registry.rank()) if self.included() else -1

    def size(self):
        self._require_registered()
        return self._registry.size() if self.process_set_id == 0 else len(self.ranks)

    def __repr__(self):
        if self.process_set_id == 0:
            return "ProcessSet(process_set_id=0, ranks=all)"
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class Registry:
    """One binding's registered sets. `rank`, `size`: the binding's functions for this process's
    place in the job. `global_set` is the set of every rank (id 0)."""

    def __init__(self, rank, size):
        self.rank = rank
        self.size = size
        self.global_set = ProcessSet([])
        self.global_set.ranks = None
        self.global_set.process_set_id = 0
        self.global_set._registry = self
        self._registered = {}  # id -> ProcessSet
        self._next_id = 1

    def prepare(self, process_set):
        """The ProcessSet to register (`process_set` or a list of ranks), checked against the job
        and the sets already registered, and the id it will get."""
        ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
        if ps.process_set_id is not None:
            raise ValueError(f"{ps} is already registered")
        size = self.size()
        if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= size:
            raise ValueError(f"process set ranks {ps.ranks} must be in [0, {size})")
        for other in self._registered.values():
            if other.ranks == ps.ranks:
                raise ValueError(f"a process set with ranks {ps.ranks} is already registered: "
                                 f"{other}")
        return ps, self._next_id

    def record(self, ps, ps_id):
        """Marks `ps` registered under the id prepare() gave."""
        ps.process_set_id = ps_id
        ps._registry = self
        self._registered[ps_id] = ps
        self._next_id = ps_id + 1
        return ps

    def is_registered(self, process_set):
        ps_id = process_set.process_set_id
        return bool(ps_id) and self._registered.get(ps_id) is process_set

    def forget(self, process_set):
        del self._registered[process_set.process_set_id]
        process_set.process_set_id = None

    def forget_all(self):
        for ps in self._registered.values():
            ps.process_set_id = None
        self._registered.clear()
        self._next_id = 1

    def get(self, process_set_id):
        """The registered set with this id (0: the global set); raises ValueError if none."""
        ps = self.global_set if process_set_id == 0 else self._registered.get(process_set_id)
        if ps is None:
            raise ValueError(f"no process set with id {process_set_id} is registered")
        return ps

    def op_id(self, process_set):
        """The id a collective on `process_set` carries; raises when this rank is not a member."""
        if process_set is None or process_set is self.global_set:
            return 0
        process_set._require_registered()
        if not process_set.included():
            raise ValueError(f"rank {self.rank()} is not a member of {process_set}")
        return process_set.process_set_id

    def op_root(self, process_set, root_rank):
        """The root a broadcast on `process_set` carries, for a root given as a global rank (as
        in Horovod): its place in the set, whose sub-job numbers the members 0..k-1. A root
        outside the set is refused; the global set's roots pass through (the daemon checks
        their range)."""
        if process_set is None or process_set is self.global_set:
            return root_rank
        process_set._require_registered()
        if root_rank not in process_set.ranks:
            raise ValueError(f"root_rank {root_rank} is not a member of {process_set} (root_rank "
                             "is a global rank)")
        return process_set.ranks.index(root_rank)

