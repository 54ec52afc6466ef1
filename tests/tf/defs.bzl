"""tf_test: a TensorFlow plugin test against real daemons (//tests:defs.bzl), given the op
library; TF_WORKER_FILES: what tf_worker.py runs."""

load("//tests:defs.bzl", "daemon_py_test")

# What tf_worker.py runs: the worker and every scenario module it imports.
TF_WORKER_FILES = [
    "adasum_scenarios.py",
    "api_scenarios.py",
    "gpu_scenarios.py",
    "horovod_scenarios.py",
    "keras_scenarios.py",
    "sync_bn_scenarios.py",
    "tf_worker.py",
    "training_scenarios.py",
]

def tf_test(name, **kwargs):
    daemon_py_test(name, libraries = {"tf_ops": "//tfplugin:_allreduced_ops.so"}, **kwargs)
