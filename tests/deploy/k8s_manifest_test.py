"""Checks deploy/k8s/allreduced-daemonset.yaml and deploy/Containerfile: the settings that keep
running jobs alive and the daemon confined (updateStrategy OnDelete, gRPC health probes on the
cluster port, advertised address from the node's IP, resources, priority class, seccomp, read-only
root filesystem), the coordinator named in one place, and the image the manifests expect.

Paths come from the environment (ARD_BIN_MANIFEST, ARD_BIN_CONTAINERFILE, ARD_BIN_CONFIG_PROTO,
set by pytest_main.py from the BUILD file's arguments). PyYAML: Debian python3-yaml.
"""
import os
import re
import subprocess

import pytest
import yaml

MANIFEST = os.environ["ARD_BIN_MANIFEST"]
CONTAINERFILE = os.environ["ARD_BIN_CONTAINERFILE"]
CONFIG_PROTO = os.environ["ARD_BIN_CONFIG_PROTO"]


@pytest.fixture(scope="module")
def docs():
    with open(MANIFEST) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def pod(docs):
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def daemon(pod):
    [c] = [c for c in pod["containers"] if c["name"] == "allreduced"]
    return c


def config_text(docs):
    return one(docs, "ConfigMap")["data"]["allreduced.conf"]


def cluster_port(docs):
    m = re.search(r'^cluster_address:\s*"[^"]*:(\d+)"', config_text(docs), re.M)
    assert m, "allreduced.conf sets no cluster_address"
    return int(m.group(1))


def test_update_strategy_is_on_delete(docs):
    # A rolling update restarts every node's daemon in turn: each restart fails running jobs.
    assert one(docs, "DaemonSet")["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_probes_use_grpc_health_on_the_cluster_port(docs, daemon):
    port = cluster_port(docs)
    [cluster] = [p for p in daemon["ports"] if p["name"] == "cluster"]
    assert cluster["containerPort"] == port and cluster["hostPort"] == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert probe in daemon, f"no {probe}"
        assert daemon[probe]["grpc"]["port"] == port, (probe, daemon[probe])
        assert "tcpSocket" not in daemon[probe] and "httpGet" not in daemon[probe]
    # Liveness must not restart a merely busy daemon quickly (a restart fails the node's jobs).
    live = daemon["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 30, live


def env_field(container, name):
    [e] = [e for e in container["env"] if e["name"] == name]
    return e["valueFrom"]["fieldRef"]["fieldPath"]


def test_advertise_address_is_the_node_ip(docs, daemon):
    assert env_field(daemon, "HOST_IP") == "status.hostIP"
    assert env_field(daemon, "NODE_NAME") == "spec.nodeName"
    script = daemon["command"][-1]
    assert f'--advertise_address="$HOST_IP:{cluster_port(docs)}"' in script, script
    assert "advertise_address" not in config_text(docs)


def run_start_script(daemon, env):
    """Runs the container's start script with `exec` replaced by printing the arguments."""
    script = daemon["command"][-1].replace("exec /usr/local/bin/allreduced", "printf '%s\\n'")
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split("\n")


def test_coordinator_is_named_once_and_only_its_node_coordinates(docs, daemon):
    coordinator = one(docs, "ConfigMap")["data"]["coordinator"]
    node = coordinator.rsplit(":", 1)[0]
    with open(MANIFEST) as f:
        text = f.read()
    # Once as a value (comments may describe it, but not repeat the address).
    values = "\n".join(l.split("#")[0] for l in text.splitlines())
    assert values.count(coordinator) == 1, "the coordinator address appears more than once"
    assert not re.search(r"^\s*coordinator\s*:", config_text(docs), re.M)
    [ref] = [e for e in daemon["env"] if e["name"] == "COORDINATOR"]
    assert ref["valueFrom"]["configMapKeyRef"]["key"] == "coordinator"

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COORDINATOR": coordinator}
    on_coordinator = run_start_script(daemon, dict(base, NODE_NAME=node, HOST_IP="10.0.0.1"))
    assert "--coordinator=" in on_coordinator, on_coordinator
    by_ip = run_start_script(daemon, dict(base, COORDINATOR="10.0.0.1:7070", NODE_NAME="other",
                                          HOST_IP="10.0.0.1"))
    assert "--coordinator=" in by_ip, by_ip
    follower = run_start_script(daemon, dict(base, NODE_NAME="node-9", HOST_IP="10.0.0.9"))
    assert f"--coordinator={coordinator}" in follower, follower
    assert "--host_name=node-9" in follower and "--advertise_address=10.0.0.9:7070" in follower


def test_resources_priority_and_confinement(docs, pod):
    classes = [d for d in docs if d["kind"] == "PriorityClass"]
    assert pod["priorityClassName"] in [c["metadata"]["name"] for c in classes]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    for c in pod["initContainers"] + pod["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert "ALL" in sc["capabilities"]["drop"], c["name"]
        res = c["resources"]
        assert res["requests"]["cpu"] and res["requests"]["memory"], c["name"]
        assert res["limits"]["memory"], c["name"]


def test_config_sets_only_daemon_config_fields(docs):
    with open(CONFIG_PROTO) as f:
        fields = set(re.findall(r"^\s*(?:\w+)\s+([a-z_][a-z0-9_]*)\s*=\s*\d+;", f.read(), re.M))
    assert len(fields) > 10, "the field parser is out of date"
    for line in config_text(docs).splitlines():
        name = line.split(":")[0].strip()
        assert name in fields, f"'{name}' is not a DaemonConfig field"


def test_containerfile_runs_the_setup_and_builds_what_the_manifest_runs(docs, pod):
    with open(CONTAINERFILE) as f:
        text = f.read()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M)
    assert len(stages) == 2 and stages[0][1] == "build", stages
    build = text.split("\nFROM ")[1]
    assert "tools/bootstrap.sh" in build  # the README's set-up (tools/main_job.sh runs it first)
    assert "//daemon:allreduced" in build and "//ctl:allreducectl" in build
    runtime = text.split("\nFROM ")[2]
    assert "/usr/local/bin/" in runtime
    for c in pod["containers"]:
        assert "/usr/local/bin/allreduced" in " ".join(c["command"])
    m = re.search(r"^USER\s+(\d+):(\d+)", runtime, re.M)
    assert m, "the image runs as root"
    sc = pod["securityContext"]
    assert (int(m.group(1)), int(m.group(2))) == (sc["runAsUser"], sc["runAsGroup"])
