"""The pip wheel (tools/build_wheel.py) installed into a fresh virtual environment: the Keras demo
runs from there on 4 ranks over two daemons with neither PYTHONPATH nor ALLREDUCED_TF_OPS (the
package and its op library come from the wheel), and a TensorFlow of another release is refused
at import with a message naming both versions.

The fresh venv has no pip and no TensorFlow of its own: this process's pip installs the wheel
into it offline, and a .pth file adds the site-packages of this process's TensorFlow (the one
the op library was built against), so the test needs no network and no second TensorFlow."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Cluster  # noqa: E402
from allreduced.launch import RankGroup  # noqa: E402  (harness puts python/ first)


def tensorflow_site_packages():
    r = subprocess.run([sys.executable, "-c", "import importlib.util, os; print(os.path.dirname("
                        "os.path.dirname(importlib.util.find_spec('tensorflow').origin)))"],
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(python of a fresh venv with the wheel installed, the wheel's path)."""
    tmp = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build_wheel.py"), "--ops",
                        os.environ["ARD_BIN_TF_OPS"], "--out", str(tmp / "dist")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = r.stdout.strip().splitlines()[-1]
    assert os.path.basename(wheel).startswith("allreduced-") and "-cp311-" in wheel, wheel
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=120)
    python = str(env_dir / "bin" / "python")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                        "--no-index", "--no-deps", wheel], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    with open(os.path.join(purelib, "tensorflow_of_the_build.pth"), "w") as f:
        f.write(tensorflow_site_packages() + "\n")
    return python, wheel


def clean_env(**extra):
    """This process's environment less what would point Python at the source tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ALLREDUCED_TF_OPS", "PYTHONSAFEPATH")}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", **extra)
    return env


def test_the_wheel_holds_the_package_and_op_library_and_no_tensorflow_dependency(venv):
    python, wheel = venv
    script = ("import allreduced, allreduced.tensorflow.keras\n"
              "from allreduced.tensorflow.ops_library import _path\n"
              "print(allreduced.__file__); print(_path())")
    r = subprocess.run([python, "-c", script], capture_output=True, text=True, cwd="/",
                       env=clean_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    package, library = r.stdout.strip().splitlines()[-2:]
    prefix = os.path.dirname(os.path.dirname(python))
    assert package.startswith(prefix) and library.startswith(prefix), r.stdout
    r = subprocess.run([python, "-c", "import importlib.metadata as m; "
                        "print(m.requires('allreduced'))"], capture_output=True, text=True,
                       cwd="/", env=clean_env(), timeout=60)
    assert r.stdout.strip() == "None", r.stdout + r.stderr


def test_another_tensorflow_release_is_refused_at_import(venv, tmp_path):
    python, _ = venv
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "2.20.0"\n')
    r = subprocess.run([python, "-c", "import allreduced.tensorflow"], capture_output=True,
                       text=True, cwd="/", env=clean_env(PYTHONPATH=str(tmp_path)), timeout=60)
    assert r.returncode != 0
    assert "allreduced was built for TensorFlow 2.21" in r.stderr, r.stderr
    assert "TensorFlow 2.20.0 is installed" in r.stderr, r.stderr


def test_the_keras_demo_runs_from_the_installed_wheel_on_two_hosts(venv, monkeypatch):
    python, _ = venv
    for name in ("PYTHONPATH", "ALLREDUCED_TF_OPS", "PYTHONSAFEPATH"):
        monkeypatch.delenv(name, raising=False)  # RankGroup passes this process's environment
    demo = os.path.abspath(os.path.join(ROOT, "tfplugin", "examples", "train_keras.py"))
    cluster = Cluster(host_timeout_ms=10000)
    try:
        daemons = [cluster.add(f"wheel-{i}") for i in range(2)]
        group = RankGroup([d.socket for d in daemons], 2, [python, demo], job="wheel-demo",
                          env={"TF_CPP_MIN_LOG_LEVEL": "3"}, give_rank=False, text=True)
        lines = [[] for _ in group.procs]
        group.read_lines(lambda rank, line: lines[rank].append(line))
        group.wait(timeout_s=240)
        outputs = ["".join(chunk) for chunk in lines]
        for rank, p in enumerate(group.procs):
            assert p.returncode == 0 and rank not in group.timed_out, outputs[rank]
        assert "epoch 5: loss" in outputs[0], outputs[0]
        assert "weights identical on all 4 ranks" in outputs[0], outputs[0]
    finally:
        cluster.close()
