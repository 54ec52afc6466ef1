"""Refuses, with a clear error, a torch this package cannot work with. The wheel declares no
torch dependency (as with TensorFlow): the user's own torch is used, whatever its build (CPU,
CUDA), and the binding compiles nothing against it; only the Python API it calls must exist.
TESTED is the version tools/requirements.txt pins (tests/torch/version_check_test keeps the two
alike)."""
TESTED = "2.15.0"
MINIMUM = (1, 12)

try:
    import torch
except ImportError as error:
    raise ImportError(f"allreduced.torch needs PyTorch, which is not installed: "
                      f"pip install torch=={TESTED} (the tested version; in a checkout of "
                      f"allreduced, tools/bootstrap.sh installs it into .venv)") from error


def _parse(version):
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


if _parse(torch.__version__) < MINIMUM:
    raise ImportError(f"allreduced.torch needs torch >= {'.'.join(map(str, MINIMUM))}; "
                      f"found {torch.__version__} (tested: torch=={TESTED}; in a checkout of "
                      f"allreduced, tools/bootstrap.sh installs it into .venv)")
