"""The package's layers (LAYOUT: python/allreduced): allreduced.common imports neither tensorflow
nor torch nor the bindings (only itself and the launcher's standard library modules, e.g. the
timeline finds allreducectl as the launcher does); allreduced.launch imports only the standard library and itself; no
module of the package takes part in an import circle, counting imports inside functions."""
import ast
import os
import subprocess
import sys

import pytest

# Makes the named top-level packages unimportable in the interpreter it runs in.
BLOCKER = """
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("blocked by import_layers_test: " + name)
        return None
sys.meta_path.insert(0, Blocker())
"""
FRAMEWORKS = ["tensorflow", "torch", "keras", "tf_keras", "numpy"]


def package_dir():
    """python/allreduced in the runfiles (every module, not only common/ and launch/)."""
    root = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", ""))
    candidate = os.path.join(root, "python", "allreduced")
    if not os.path.isdir(candidate):  # run by hand from the source tree
        candidate = os.path.join(os.path.dirname(__file__), "..", "..", "python", "allreduced")
    return os.path.abspath(candidate)


def module_files(top):
    """{module name: file} for every module of the package under `top` ("allreduced.common")."""
    base = os.path.dirname(package_dir())
    start = os.path.join(base, *top.split("."))
    found = {}
    for directory, _, names in os.walk(start):
        for name in names:
            if not name.endswith(".py") or name == "__main__.py":  # runs, not imported
                continue
            rel = os.path.relpath(os.path.join(directory, name), base)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = os.path.join(directory, name)
    return found


def imports_of(module, path):
    """The allreduced modules `module` imports anywhere in its file (functions included)."""
    tree = ast.parse(open(path).read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.split(".")[0] == "allreduced" and n != module}


def test_no_import_circles():
    modules = module_files("allreduced")
    # A module's own packages are always imported before it: importing one of them back (`from
    # allreduced.launch import hosts` in allreduced.launch.rank_group) is no circle.
    graph = {m: {n for n in imports_of(m, p) if n in modules and not m.startswith(n + ".")}
             for m, p in modules.items()}
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                pytest.fail("import circle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)


def fresh_import(module, blocked):
    """Imports `module` first in a fresh interpreter with `blocked` unimportable; the sorted
    allreduced modules it loaded."""
    code = (BLOCKER.format(blocked=set(blocked)) + f"import {module}\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'allreduced')))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(package_dir())]
                                                        + sys.path))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert run.returncode == 0, f"import {module} first: {run.stderr}"
    return run.stdout.split()


@pytest.mark.parametrize("module", sorted(module_files("allreduced.common")))
def test_common_needs_no_framework(module):
    loaded = fresh_import(module, FRAMEWORKS + ["allreduced.tensorflow"])
    outside = [m for m in loaded if m != "allreduced"
               and not m.startswith(("allreduced.common", "allreduced.launch"))]
    assert not outside, f"{module} loads {outside}"


@pytest.mark.parametrize("module", sorted(module_files("allreduced.launch")))
def test_launch_is_standard_library_only(module):
    loaded = fresh_import(module, FRAMEWORKS)
    outside = [m for m in loaded if m != "allreduced" and not m.startswith("allreduced.launch")]
    assert not outside, f"{module} loads {outside}"
