"""Builds the allreduced wheel: the Python package (python/allreduced) and the op library
built by Bazel, for the TensorFlow and Python it was built with.

    bazel build //tfplugin:_allreduced_ops.so
    .venv/bin/python tools/build_wheel.py [--ops bazel-bin/tfplugin/_allreduced_ops.so] [--out dist]

Run it with the .venv's Python (the one Bazel built against, tools/python_configure.bzl): the
wheel records that TensorFlow's version in allreduced/tensorflow/_built_for.py, checked at
import (allreduced/tensorflow/built_for.py), and is tagged for that Python and platform. It
declares no dependency on TensorFlow: pip cannot say "tensorflow or tensorflow-cpu", and
depending on one would install a second TensorFlow beside a user's other one. Standard library
only (a wheel is a zip file with a few metadata files); prints the wheel's path.
"""
import argparse
import base64
import hashlib
import os
import re
import sys
import sysconfig
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "python", "allreduced")


def _version():
    text = open(os.path.join(PACKAGE, "__init__.py")).read()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def _tensorflow_version():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    return tf.__version__


def _files(ops_path, tf_version):
    """(path in the wheel, bytes) for every file of the package."""
    for directory, subdirs, names in os.walk(PACKAGE):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                full = os.path.join(directory, name)
                arcname = os.path.relpath(full, os.path.dirname(PACKAGE))
                yield arcname, open(full, "rb").read()
    yield "allreduced/tensorflow/_allreduced_ops.so", open(ops_path, "rb").read()
    yield "allreduced/tensorflow/_built_for.py", (
        '"""Written by tools/build_wheel.py: the TensorFlow this wheel\'s op library was built '
        'for."""\n'
        f'TENSORFLOW_VERSION = "{tf_version}"\n').encode()


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(ops_path, out_dir):
    version, tf_version = _version(), _tensorflow_version()
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"{py}-{py}-{platform}"
    dist_info = f"allreduced-{version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: allreduced\nVersion: {version}\n"
                f"Summary: Horovod's TensorFlow API over the allreduced daemon (op library built "
                f"for TensorFlow {tf_version})\n"
                f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*\n")
    wheel = (f"Wheel-Version: 1.0\nGenerator: allreduced tools/build_wheel.py\n"
             f"Root-Is-Purelib: false\nTag: {tag}\n")
    files = list(_files(ops_path, tf_version)) + [
        (f"{dist_info}/METADATA", metadata.encode()),
        (f"{dist_info}/WHEEL", wheel.encode()),
        (f"{dist_info}/top_level.txt", b"allreduced\n")]
    record = "\n".join([_record_line(n, d) for n, d in files] + [f"{dist_info}/RECORD,,", ""])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"allreduced-{version}-{tag}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files + [(f"{dist_info}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", default=os.path.join(ROOT, "bazel-bin", "tfplugin",
                                                      "_allreduced_ops.so"),
                        help="the op library (bazel build //tfplugin:_allreduced_ops.so)")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"), help="output directory")
    args = parser.parse_args()
    if not os.path.exists(args.ops):
        sys.exit(f"build_wheel: {args.ops} not found; bazel build //tfplugin:_allreduced_ops.so")
    print(build(args.ops, args.out))


if __name__ == "__main__":
    main()
