"""daemon_py_test: a Python test (pytest through //tests:pytest_main.py) against real daemons.

Every such test gets the daemon, allreducectl and the native libraries it names as ARD_BIN_*
variables (see pytest_main.py) and in its runfiles, with the Python package and the launcher. It
is built only where the Python environment (.venv, with TensorFlow and torch) is set up. The
framework suites wrap it: tf_test (tests/tf/defs.bzl), torch_test (tests/torch/defs.bzl).
"""

load("@local_config_python//:defs.bzl", "TF_ENABLED")

def daemon_py_test(
        name,
        libraries,
        size = "large",
        srcs = [],
        data = [],
        args = [],
        shard_count = None):
    """`name`.py is the test file; `libraries` {NAME: label} the native libraries it loads
    (passed as NAME=path); `srcs` its other Python modules; `data` what it runs; `args` extra
    NAME=PATH pairs; `shard_count` splits its tests over that many processes (pytest_main.py),
    each with the size's time limit."""
    test_file = name + ".py"
    library_args = ["%s=$(location %s)" % (arg, label) for arg, label in sorted(libraries.items())]
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
        ] + library_args + args + ["$(location %s)" % test_file],
        data = data + sorted(libraries.values()) + [
            "//ctl:allreducectl",
            "//daemon:allreduced",
            "//python:allreduced_py",
        ],
        main = "//tests:pytest_main.py",
        python_version = "PY3",
        tags = [] if TF_ENABLED else ["manual"],
        deps = ["//python:launch_py"],
    )
