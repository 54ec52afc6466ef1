"""An elastic job's process that registers while the coordinator holds its host's registration of
the forming generation joins that generation: the host amends its registration rather than
starting a generation of its own (which left both halves below min_np until the form timeout).
One real daemon (its own coordinator), two real collective_worker processes; the second starts
only once the daemon logged the first one's registration as held, so the order is certain."""
import os
import subprocess

from harness import Cluster, binary, lines_with, wait_until


def start_worker(daemon):
    env = dict(os.environ, ALLREDUCED_SOCKET=daemon.socket, ALLREDUCED_JOB="amend",
               ALLREDUCED_ELASTIC_MIN_NP="2")
    for name in ("ALLREDUCED_RANK", "ALLREDUCED_SIZE", "ALLREDUCED_LOCAL_RANK",
                 "ALLREDUCED_LOCAL_SIZE"):
        env.pop(name, None)
    return subprocess.Popen([binary("collective_worker"), "matrix"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_process_registering_while_its_hosts_registration_is_held_joins_the_generation():
    cluster = Cluster()
    try:
        daemon = cluster.add("forming", extra_flags=["--job_form_timeout_ms=30000"])
        first = start_worker(daemon)
        wait_until(lambda: "registration held job=amend host=forming ranks=1 " in daemon.read_log(),
                   60, "the first process's registration held (1 rank, below min_np 2)")
        second = start_worker(daemon)
        outputs = []
        for p in (first, second):
            out, _ = p.communicate(timeout=120)
            outputs.append((p.returncode, out.splitlines()))
        report = "\n".join(f"[{i}] rc={rc}\n" + "\n".join(lines)
                           for i, (rc, lines) in enumerate(outputs)) + cluster.logs()
        assert [rc for rc, _ in outputs] == [0, 0], report
        topologies = [lines_with(lines, "TOPOLOGY ")[0].split()[1:3] for _, lines in outputs]
        assert sorted(topologies) == [["0", "2"], ["1", "2"]], report  # (rank, size): one job of 2
        assert all(not lines_with(lines, "MISMATCH") for _, lines in outputs), report
        log = daemon.read_log()
        assert "registration held job=amend host=forming ranks=2 " in log, report
        assert "amendment=1" in log, report
    finally:
        cluster.close()
