"""tf_test: a TensorFlow plugin test (pytest through //tests:pytest_main.py) against real daemons.

Every such test gets the daemon, allreducectl and the op library as ARD_BIN_* variables (see
pytest_main.py) and in its runfiles, with the Python package and the launcher; it is built only
where TensorFlow is installed.
"""

load("@local_config_python//:defs.bzl", "TF_ENABLED")

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

def tf_test(name, size = "large", srcs = [], data = [], args = [], shard_count = None):
    """`name`.py is the test file; `srcs` its other Python modules, `args` extra NAME=PATH pairs;
    `shard_count` splits its tests over that many processes (pytest_main.py), each with the
    size's time limit."""
    test_file = name + ".py"
    native.py_test(
        name = name,
        size = size,
        shard_count = shard_count,
        srcs = [test_file] + srcs + [
            "//tests:pytest_main.py",
            "//tests/integration:harness.py",
        ],
        args = [
            "allreduced=$(location //daemon:allreduced)",
            "allreducectl=$(location //ctl:allreducectl)",
            "tf_ops=$(location //tfplugin:_allreduced_ops.so)",
        ] + args + ["$(location %s)" % test_file],
        data = data + [
            "//ctl:allreducectl",
            "//daemon:allreduced",
            "//tfplugin:_allreduced_ops.so",
            "//python:allreduced_py",
        ],
        main = "//tests:pytest_main.py",
        python_version = "PY3",
        tags = [] if TF_ENABLED else ["manual"],
        deps = ["//python:launch_py"],
    )
