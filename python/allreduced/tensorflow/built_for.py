"""The import-time check that the installed TensorFlow is the one the op library was built for.

A wheel (tools/build_wheel.py) carries _built_for.py, naming the TensorFlow version its
_allreduced_ops.so was compiled against; the wheel cannot depend on TensorFlow itself (pip cannot
say "tensorflow or tensorflow-cpu"), so this is where a mismatch is caught, before TensorFlow
tries to load the library. A source tree or Bazel run has no _built_for.py: its op library is
built against the TensorFlow at hand.
"""
import os

import tensorflow as tf


def _release(version):
    return ".".join(version.split(".")[:2])


def check():
    try:
        from allreduced.tensorflow._built_for import TENSORFLOW_VERSION
    except ImportError:
        return
    found = getattr(tf, "__version__", "unknown")
    if _release(found) != _release(TENSORFLOW_VERSION):
        where = os.path.dirname(getattr(tf, "__file__", None) or "?")
        raise ImportError(
            f"allreduced was built for TensorFlow {_release(TENSORFLOW_VERSION)} "
            f"({TENSORFLOW_VERSION}), but TensorFlow {found} is installed ({where}). Install "
            f"tensorflow-cpu=={_release(TENSORFLOW_VERSION)}.* (or tensorflow=="
            f"{_release(TENSORFLOW_VERSION)}.*), or an allreduced wheel built for TensorFlow "
            f"{_release(found)}.")


check()
