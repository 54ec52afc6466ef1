"""Process sets: collectives among a subset of the job's ranks, like Horovod's ProcessSet (the
objects and their registry are allreduced.common.process_sets').

Each set is added collectively (every rank of the job calls add_process_set in the same order);
its members open one more connection to their daemon and form a sub-job "<job>.ps<id>", so the
daemon negotiates and reduces among the members only (Average divides by the set's size).
Non-members keep no state for it beyond the ProcessSet object."""
from allreduced.common.process_sets import ProcessSet, Registry
from allreduced.torch import basics

registry = Registry(basics.rank, basics.size)
global_process_set = registry.global_set


def forget_all():
    registry.forget_all()


def add_process_set(process_set):
    """Adds a ProcessSet (or a list of ranks); every rank of the job must call this, in the same
    order. Returns the ProcessSet."""
    ps, ps_id = registry.prepare(process_set)
    # Which host holds each rank, so members know their local rank and size within the set.
    hosts = basics._hooks["allgather_sizes"](basics.cross_rank(), f"process_set.{ps_id}.hosts")
    me = basics.rank()
    if me in ps.ranks:
        local = [r for r in ps.ranks if hosts[r] == hosts[me]]
        basics.add_connection(ps_id, ps.ranks.index(me), len(ps.ranks), local.index(me),
                              len(local))
    return registry.record(ps, ps_id)


def remove_process_set(process_set):
    """Removes a process set (collectively). True when it was added."""
    if not registry.is_registered(process_set):
        return False
    basics.remove_connection(process_set.process_set_id)
    registry.forget(process_set)
    return True


basics._hooks.update(add_process_set=add_process_set, forget_process_sets=forget_all)


def process_set_id(process_set):
    """The id of `process_set`; raises ValueError when this rank is not a member."""
    return registry.op_id(process_set)


__all__ = ["ProcessSet", "add_process_set", "global_process_set", "process_set_id",
           "remove_process_set"]
