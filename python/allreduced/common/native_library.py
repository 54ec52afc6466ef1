"""Where the package finds a native library it loads (the TensorFlow op library, the client
library): one rule for every framework binding, in this order:

1. the environment variable the caller names (an explicit path wins);
2. beside the Python module that loads it (the wheel ships it there);
3. the Bazel runfiles tree, where the source tree's layout is kept: <root>/<package>/<file>;
4. the source tree on PYTHONPATH after `bazel build`: <root>/bazel-bin/<package>/<file>;
where <root> is the directory holding python/ (python/allreduced/common -> three levels up).
"""
import os

_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     ".."))


def find(file_name, env_var, beside, bazel_package):
    """The absolute path of `file_name`. `beside`: the directory of the module that loads it;
    `bazel_package`: the Bazel package that builds it ("client", "tfplugin"). Raises ImportError
    naming every place it looked."""
    candidates = [
        os.environ.get(env_var, ""),
        os.path.join(beside, file_name),
        os.path.join(_ROOT, bazel_package, file_name),
        os.path.join(_ROOT, "bazel-bin", bazel_package, file_name),
    ]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return os.path.abspath(candidate)
    raise ImportError(f"allreduced: {file_name} not found (set {env_var}); looked in "
                      + ", ".join(c for c in candidates if c))
