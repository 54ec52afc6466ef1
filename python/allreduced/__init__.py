"""allreduced: data-parallel collectives through the host's allreduced daemon.

`import allreduced.tensorflow as hvd` is meant as a drop-in for `horovod.tensorflow`.
"""

__version__ = "0.1.0"
