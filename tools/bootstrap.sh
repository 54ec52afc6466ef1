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
  libgloo-dev openmpi-bin libopenmpi-dev   # peers measured side by side in bench/
  python3 python3-pytest python3-venv python3-yaml   # python3-yaml: tests/deploy (k8s manifests)
  systemd
  iproute2 procps
  clang libclang-rt-14-dev   # hostile local clients: libFuzzer + ASan/UBSan (tests/fuzz/)
  openssl util-linux   # fault suite (issue 7): test certificates; unshare/nsenter for link cuts
  openssh-client openssh-server   # the launcher's ssh path, tested against a private sshd
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

# The Python virtual environment in the repository (.venv): TensorFlow (CPU) for the plugin and
# the Python tests, and tf_keras without its dependencies (tools/requirements_nodeps.txt says
# why). Re-installed only when either requirements file changes.
venv=.venv
want=$(cat tools/requirements.txt tools/requirements_nodeps.txt | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: creating $venv (tensorflow-cpu and test packages from PyPI)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -r tools/requirements.txt
  "$venv/bin/pip" install -q --no-deps -r tools/requirements_nodeps.txt
  echo "$want" >"$venv/.requirements.sha256"
fi
