#!/usr/bin/env bash
# Installs what the build and tests need on a fresh Debian 12 machine, idempotently: only missing
# apt packages are installed (apt-get update runs only then). Sourced or run by the README's two
# commands; safe to run again.
set -euo pipefail

APT_PACKAGES=(
  bazel-bootstrap
  g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev catch2 libsystemd-dev
  libcpp-httplib-dev   # the metrics endpoint's HTTP server
  libxxhash-dev   # the data plane's checksum (XXH3, header-only)
  libgloo-dev openmpi-bin libopenmpi-dev   # peers measured side by side in bench/
  python3 python3-pytest python3-venv python3-yaml   # python3-yaml: tests/deploy (k8s manifests)
  systemd
  iproute2 procps
  clang libclang-rt-14-dev   # hostile local clients: libFuzzer + ASan/UBSan (tests/fuzz/)
  openssl util-linux   # fault suite (issue 7): test certificates; unshare/nsenter for link cuts
  openssh-client openssh-server   # the launcher's ssh path, tested against a private sshd
  etcd-server etcd-client   # coordinator failover: a 3-member etcd on loopback (tests/fault)
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Python virtual environment (.venv): TensorFlow (CPU) for the TF plugin, PyTorch for
# allreduced.torch, and the test packages, from PyPI; tf_keras without its dependencies
# (tools/requirements_nodeps.txt says why). torch's wheel from PyPI is the CUDA build (~3 GB with its
# nvidia-* wheels), so the environment is made once per machine, not per checkout: it lives in
# $ALLREDUCED_VENV_CACHE (default ~/.cache/allreduced) as venv-<hash of the requirements files>, and
# .venv in the checkout is a symlink to it. A fresh clone with an unchanged list reuses it at once;
# a changed list makes a new one beside it. A lock serialises two bootstraps on one machine; a venv
# is marked complete only after every install succeeded, so an interrupted one is rebuilt.
venv=.venv
want=$(cat tools/requirements.txt tools/requirements_nodeps.txt | sha256sum | cut -d' ' -f1)
cache=${ALLREDUCED_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allreduced}
shared="$cache/venv-${want:0:16}"
mkdir -p "$cache"
(
  flock 9
  if [ ! -f "$shared/.complete" ]; then
    echo "bootstrap: creating $shared (tensorflow-cpu, torch and test packages from PyPI)" >&2
    rm -rf "$shared"
    python3 -m venv "$shared"
    "$shared/bin/pip" install -q --upgrade pip
    "$shared/bin/pip" install -q -r tools/requirements.txt
    "$shared/bin/pip" install -q --no-deps -r tools/requirements_nodeps.txt
    echo "$want" >"$shared/.requirements.sha256"
    touch "$shared/.complete"
  fi
) 9>"$cache/.lock"
if [ "$(readlink "$venv" 2>/dev/null)" != "$shared" ]; then
  # An older checkout's .venv was a directory of its own: replace it with the shared one.
  rm -rf "$venv"
  ln -s "$shared" "$venv"
fi
