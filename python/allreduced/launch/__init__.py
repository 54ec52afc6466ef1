"""allreduced's launcher, horovodrun's command line:

    python -m allreduced.launch -np 4 -H host1:2,host2:2 python train.py
    python -m allreduced.launch -np 8 python train.py          # hosts from the cluster view
    allreducectl run -np 8 python train.py                      # the same, through allreducectl

Modules: hosts (where ranks run: -H, hostfile, cluster view, rank assignment), remote (starting a
rank over ssh so that it can be stopped), rank_group (RankGroup, starting and stopping a launch's
processes; also how the repository's tests start a job's ranks), elastic (--min-np/--max-np:
free slots, blacklisted hosts, discovery scripts, replacing failed workers), cli (the command
line). On a cluster with its own launcher, use it instead (`mpirun`, `srun`): the client library
reads their rank variables itself. Standard library only.
"""
from allreduced.launch.hosts import Host, HostError, Slot, local_slots  # noqa: F401
from allreduced.launch.rank_group import RANK_VARIABLES, RankGroup, rank_env  # noqa: F401
