"""Mutual TLS for the fault tests: a set of certificates made with openssl (a cluster CA and a
rogue one), the daemon and allreducectl flags that use them, and a cluster of daemons that talk
over TLS. Shared by tls_test.py (the gRPC port) and data_plane_tls_test.py (the data plane)."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from fault_util import HOST_TIMEOUT_MS, STALL_WARNING_MS, harness, wait_until

def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d):
    """CA `ca` signing h-a, h-b and ctl; rogue CA `rogue` signing `intruder`. Every certificate
    names 127.0.0.1 (peers verify the address they dial) and may serve and be a client."""
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue"):
        openssl("req", "-x509", *key, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                "-subj", f"/CN=ard-test-{ca}", cwd=d)
    for name, ca in (("h-a", "ca"), ("h-b", "ca"), ("ctl", "ca"), ("intruder", "rogue")):
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "ext", cwd=d)


@pytest.fixture(scope="module")
def pki():
    """A directory of make_pki's certificates, for the module's tests."""
    d = tempfile.mkdtemp(prefix="ard-pki.", dir="/tmp")
    make_pki(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tls_flags(pki, name, ca="ca"):
    """The daemon flags of mutual TLS with `name`'s certificate from make_pki."""
    return [f"--tls_cert_file={pki}/{name}.pem", f"--tls_key_file={pki}/{name}.key",
            f"--tls_ca_file={pki}/{ca}.pem"]


def ctl_tls(pki, address, name="ctl", ca="ca", command=("status", "--json")):
    """allreducectl `command` with `name`'s certificate (None: no TLS)."""
    args = [] if name is None else ["--tls_cert", f"{pki}/{name}.pem", "--tls_key",
                                    f"{pki}/{name}.key", "--tls_ca", f"{pki}/{ca}.pem"]
    return harness.ctl("--daemon", address, "--timeout_ms", "2000", *args, *command)


def tls_status(pki, address):
    """`status --json` over TLS, or None when the call fails (exit 3: a host is DOWN, answered)."""
    r = ctl_tls(pki, address)
    return json.loads(r.stdout) if r.returncode in (0, 3) else None


def hosts_up(pki, address):
    return {h["name"] for h in (tls_status(pki, address) or {}).get("hosts", [])
            if h["state"] == "UP"}


def tls_cluster(pki, flags_of):
    """Daemons over mutual TLS, the first the coordinator: {name: extra flags} (each gets its
    own certificate), all UP before this returns."""
    c = harness.Cluster(heartbeat_ms=100, host_timeout_ms=HOST_TIMEOUT_MS)
    for name, flags in flags_of.items():
        c.add(name, extra_flags=[f"--stall_warning_ms={STALL_WARNING_MS}",
                                 "--job_form_timeout_ms=8000"] + list(flags)
              + tls_flags(pki, name))
    first = next(iter(flags_of))
    wait_until(lambda: hosts_up(pki, c.daemons[first].address) == set(flags_of), 15,
               f"{sorted(flags_of)} UP over TLS")
    return c
