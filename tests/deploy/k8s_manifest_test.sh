#!/usr/bin/env bash
# Runs k8s_manifest_test.py under Debian's python3, which has PyYAML (python3-yaml, installed by
# tools/bootstrap.sh) and pytest; the py_test interpreter (.venv) has no PyYAML.
# Usage: k8s_manifest_test.sh TEST_PY MANIFEST CONTAINERFILE CONFIG_PROTO
set -euo pipefail
python=/usr/bin/python3
if ! "$python" -c 'import yaml, pytest' 2>/dev/null; then
  echo "FAIL: $python lacks PyYAML or pytest: apt-get install python3-yaml python3-pytest" >&2
  exit 1
fi
export ARD_BIN_MANIFEST=$2 ARD_BIN_CONTAINERFILE=$3 ARD_BIN_CONFIG_PROTO=$4
exec "$python" -m pytest -q -p no:cacheprovider "$1"
