"""RELIABILITY.md agrees with the tests: its generated block is what reliability_table.py makes
from the fault tests' docstrings today, and every test it names (`path::test` anywhere in the
file, generated or hand-written rows) exists."""
import ast
import os
import re
import warnings

import reliability_table

# Test files of another branch (issue7-local: hostile local clients, fuzzing, limits) whose rows
# RELIABILITY.md already carries. While a file is absent, references into it are reported as a
# warning instead of failing; once the branch is merged they are checked like every other. Drop
# entries when merged.
PENDING_FILES = set()  # all merged (issue7-local is in main)

HERE = os.path.dirname(os.path.abspath(__file__))


def repo_root():
    # Under Bazel the runfiles tree mirrors the repository (RELIABILITY.md is a data file).
    return os.path.abspath(os.path.join(HERE, "..", ".."))


def read_doc():
    return open(os.path.join(repo_root(), "RELIABILITY.md")).read()


def locate(path):
    """A repository file: from the runfiles (the test's data), else from the source tree that
    the runfiles' RELIABILITY.md links to (rows naming tests this target does not carry)."""
    for root in (repo_root(), os.path.dirname(os.path.realpath(
            os.path.join(repo_root(), "RELIABILITY.md")))):
        if os.path.exists(os.path.join(root, path)):
            return os.path.join(root, path)
    return None


def test_generated_block_is_current():
    """The fault-suite table equals the generator's output: a changed docstring, a new or
    renamed fault test means running `python3 tests/fault/reliability_table.py --write`."""
    doc = read_doc()
    block = doc[doc.index(reliability_table.BEGIN):doc.index(reliability_table.END)
                + len(reliability_table.END) + 1]
    assert block == reliability_table.render(repo_root()), \
        "RELIABILITY.md is stale: run python3 tests/fault/reliability_table.py --write"


def defines(path, name):
    """Whether a test file defines `name`: a Python function, or in C++ a Catch2 TEST_CASE name
    or a function (a fuzz target)."""
    text = open(path).read()
    if path.endswith(".py"):
        return name in {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)}
    return f'TEST_CASE("{name}"' in text or re.search(rf"\b{re.escape(name)}\s*\(", text)


def test_every_named_test_exists():
    """Every `path::name` in RELIABILITY.md names an existing file and a test defined in it
    (a `[case]` suffix names a parametrized case and must be in the file's text)."""
    refs = re.findall(r"`([\w./-]+\.(?:py|cc))::([^`\[]+)(?:\[([^\]]+)\])?`", read_doc())
    assert len(refs) > 20, refs
    missing, pending = [], []
    for path, name, case in refs:
        full = locate(path)
        if full is None and path in PENDING_FILES:
            pending.append(f"{path}::{name}")
        elif full is None:
            missing.append(f"{path} (no such file)")
        elif not defines(full, name):
            missing.append(f"{path}::{name}")
        elif case and case not in open(full).read():
            missing.append(f"{path}::{name}[{case}]")
    assert not missing, "RELIABILITY.md names tests that do not exist: " + ", ".join(missing)
    if pending:
        warnings.warn("not on this branch yet (PENDING_FILES): " + ", ".join(pending))
