"""Refuses, with a clear error, a torch this package cannot work with. The wheel declares no
torch dependency (as with TensorFlow): the user's own torch is used, whatever its build (CPU,
CUDA), and the binding compiles nothing against it; only the Python API it calls must exist."""
try:
    import torch
except ImportError as error:
    raise ImportError("allreduced.torch needs PyTorch: pip install torch (tools/bootstrap.sh "
                      "installs the tested version)") from error

MINIMUM = (1, 12)


def _parse(version):
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


if _parse(torch.__version__) < MINIMUM:
    raise ImportError(f"allreduced.torch needs torch >= {'.'.join(map(str, MINIMUM))}; "
                      f"found {torch.__version__}")
