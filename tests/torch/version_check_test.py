"""allreduced.torch without torch: the ImportError names the tested torch version and the
bootstrap command; that version is the one tools/requirements.txt pins."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def test_the_tested_version_is_the_pinned_one():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    with open(os.path.join(ROOT, "tools", "requirements.txt")) as f:
        pinned = re.search(r"^torch==(\S+)$", f.read(), re.M).group(1)
    source = open(os.path.join(ROOT, "python", "allreduced", "torch", "version_check.py")).read()
    assert re.search(r'^TESTED = "(.*)"$', source, re.M).group(1) == pinned


def test_without_torch_the_import_error_says_what_to_install():
    # torch hidden (sys.modules entry None makes `import torch` raise ImportError).
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import allreduced.torch\nexcept ImportError as e:\n    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "pip install torch==" in out.stdout and "tools/bootstrap.sh" in out.stdout, out.stdout
