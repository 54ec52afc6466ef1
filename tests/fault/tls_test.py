"""Optional mutual TLS on the cluster and admin gRPC port (tls_cert_file, tls_key_file,
tls_ca_file), with certificates made with openssl (tls_util.make_pki): a CA for the cluster and
a rogue CA that nobody trusts."""
import json
import shutil
import subprocess
import tempfile

import pytest

from fault_util import harness, run_job, wait_until
from tls_util import pki  # noqa: F401  (a fixture)
from tls_util import ctl_tls, hosts_up, tls_cluster, tls_flags

if shutil.which("openssl") is None:
    pytest.skip("openssl is not installed", allow_module_level=True)


@pytest.fixture
def cluster(pki):
    c = tls_cluster(pki, {"h-a": [], "h-b": []})
    yield c
    c.close()


def test_mutual_tls_cluster_serves_only_certified_peers(pki, cluster):
    """Promise: with mutual TLS configured, daemons join and heartbeat over TLS, a cross-host job
    runs, and allreducectl with a certificate from the cluster CA gets status (also forwarded by a
    follower); allreducectl without TLS, allreducectl with a certificate from another CA, and a
    plaintext gRPC peer (hostile_peer) are all refused (UNAVAILABLE: the handshake fails) and the
    cluster is unaffected."""
    a, b = cluster.daemons["h-a"], cluster.daemons["h-b"]
    run_job([a.socket, b.socket], "tls")
    assert hosts_up(pki, b.address) == {"h-a", "h-b"}  # forwarded by the follower over TLS
    plain = ctl_tls(pki, a.address, name=None)
    assert plain.returncode == 1 and "cannot reach daemon" in plain.stderr, plain.stderr
    rogue = ctl_tls(pki, a.address, name="intruder", ca="rogue")
    assert rogue.returncode == 1, rogue.stdout
    r = subprocess.run([harness.binary("hostile_peer"), a.address, "negotiate", "1", "h-b"],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.startswith("STATUS 14 UNAVAILABLE"), r.stdout + r.stderr
    assert hosts_up(pki, a.address) == {"h-a", "h-b"}
    assert a.proc.poll() is None and b.proc.poll() is None


def test_mutual_tls_certificate_may_forget_a_down_host(pki, cluster):
    """Promise: over mutual TLS the client certificate is the operator's credential: `forget` of
    a DOWN host is accepted on the cluster port (on plaintext TCP it is refused, admin_commands_test),
    and an UP host is still refused."""
    a, b = cluster.daemons["h-a"], cluster.daemons["h-b"]
    up = ctl_tls(pki, a.address, command=("forget", "h-b"))
    assert up.returncode == 1 and "host h-b is UP" in up.stderr, up.stderr
    b.kill()
    wait_until(lambda: hosts_up(pki, a.address) == {"h-a"}, 15, "h-b DOWN")
    done = ctl_tls(pki, a.address, command=("forget", "h-b"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("forgot host h-b (membership epoch "), done.stdout
    status = ctl_tls(pki, a.address)
    assert status.returncode == 0, status.stderr
    assert [h["name"] for h in json.loads(status.stdout)["hosts"]] == ["h-a"]


def test_daemon_with_untrusted_certificate_cannot_join(pki, cluster):
    """Promise: a daemon whose certificate comes from another CA cannot join a TLS cluster: it
    keeps retrying (log: join failed) and never shows up in status, while the members stay UP."""
    intruder = cluster.add("intruder", extra_flags=tls_flags(pki, "intruder", ca="rogue"))
    wait_until(lambda: "join failed" in intruder.read_log(), 10, "the intruder's join to fail")
    assert hosts_up(pki, cluster.daemons["h-a"].address) == {"h-a", "h-b"}
    assert intruder.proc.poll() is None  # it retries; it is not let in


def test_partial_tls_config_is_refused_at_startup(pki):
    """Promise: a daemon given only some of the three TLS files exits at startup with one line
    naming the three settings (no plaintext fallback)."""
    d = harness.Daemon(tempfile.mkdtemp(prefix="ard-it.", dir="/tmp"), "half",
                       extra_flags=[f"--tls_cert_file={pki}/h-a.pem"])
    d.start(wait=False)
    try:
        assert d.wait_exit(10) != 0
        assert "tls_cert_file, tls_key_file and tls_ca_file" in d.read_log()
    finally:
        d.kill()
        shutil.rmtree(d.workdir, ignore_errors=True)
