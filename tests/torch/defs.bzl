"""torch_test: an allreduced.torch test (pytest through //tests:pytest_main.py) against real daemons.

Every such test gets the daemon, allreducectl and the client library as ARD_BIN_* variables (see
pytest_main.py) and in its runfiles, with the Python package and the launcher; like the
TensorFlow tests it is built only where the Python environment (.venv, with torch) is set up.
"""

load("@local_config_python//:defs.bzl", "TF_ENABLED")

def torch_test(name, size = "large", data = [], shard_count = None):
    """`name`.py is the test file; `data` what it runs (its worker scripts); `shard_count` splits
    its tests over that many processes (pytest_main.py), each with the size's time limit."""
    test_file = name + ".py"
    native.py_test(
        name = name,
        size = size,
        shard_count = shard_count,
        srcs = [
            test_file,
            "//tests:pytest_main.py",
            "//tests/integration:harness.py",
        ],
        args = [
            "allreduced=$(location //daemon:allreduced)",
            "allreducectl=$(location //ctl:allreducectl)",
            "client_lib=$(location //client:libard_client.so)",
            "$(location %s)" % test_file,
        ],
        data = data + [
            "//client:libard_client.so",
            "//ctl:allreducectl",
            "//daemon:allreduced",
            "//python:allreduced_py",
        ],
        main = "//tests:pytest_main.py",
        python_version = "PY3",
        tags = [] if TF_ENABLED else ["manual"],
        deps = ["//python:launch_py"],
    )
