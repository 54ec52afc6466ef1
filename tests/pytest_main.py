"""py_test entry point: `pytest_main.py [NAME=PATH ...] test_file.py ...`.

Each NAME=PATH (a binary from $(location ...)) becomes the environment variable ARD_BIN_<NAME>
with an absolute path, for tests/integration/harness.py; the rest goes to pytest.
With Bazel's test sharding (`shard_count`), shard i of n runs the collected tests whose index
is i modulo n.
"""
import os
import sys

import pytest


class Shard:
    """Keeps this shard's part of the collected tests (TEST_SHARD_INDEX of TEST_TOTAL_SHARDS)."""

    def __init__(self, index, total):
        self.index, self.total = index, total

    def pytest_collection_modifyitems(self, config, items):
        kept = [item for i, item in enumerate(items) if i % self.total == self.index]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def shard_plugins():
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1") or "1")
    if total <= 1:
        return []
    status = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status:  # tells Bazel this runner shards
        open(status, "a").close()
    return [Shard(int(os.environ["TEST_SHARD_INDEX"]), total)]


def main():
    rest = []
    for arg in sys.argv[1:]:
        name, sep, path = arg.partition("=")
        if sep and not arg.startswith("-") and not arg.endswith(".py"):
            os.environ["ARD_BIN_" + name.upper()] = os.path.abspath(path)
        else:
            rest.append(arg)
            if arg.endswith(".py"):
                # Bazel adds __init__.py files to runfiles, which would make pytest import the
                # test as a package member; put its own directory first so helpers import plainly.
                sys.path.insert(0, os.path.dirname(os.path.abspath(arg)))
    plugins = shard_plugins()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-rs"] + rest, plugins=plugins)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED and plugins:
        code = pytest.ExitCode.OK  # `--test_arg=-k --test_arg=NAME` selected none in this shard
    sys.exit(code)


if __name__ == "__main__":
    main()
