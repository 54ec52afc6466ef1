"""py_test entry point: `pytest_main.py [NAME=PATH ...] test_file.py ...`.

Each NAME=PATH (a binary from $(location ...)) becomes the environment variable ARD_BIN_<NAME>
with an absolute path, for tests/integration/harness.py; the rest goes to pytest.
"""
import os
import sys

import pytest


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
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs"] + rest))


if __name__ == "__main__":
    main()
