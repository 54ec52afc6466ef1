"""bench/cost_model.py: the fit recovers known parameters from synthetic run_peers.sh logs, and
too few measured points give a clear error instead of a model."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model  # noqa: E402

# c (us), alpha (us), beta (us per byte) for each path.
KNOWN = {"rd": (300.0, 150.0, 0.002), "ring": (400.0, 90.0, 0.0009)}
SIZES = [4 << k for k in range(0, 27, 2)]  # 4 B .. 256 MiB


CORES = 2


def write_logs(tmp_path, hosts_list, sizes, noise=lambda h, s: 1.0):
    for hosts in hosts_list:
        rows = []
        for s in sizes:
            path = "rd" if s < 65536 else "ring"
            t = cost_model.predict(KNOWN[path], path, hosts, s, CORES) * noise(hosts, s)
            rows.append(f"{s:12d} {s // 4:12d}  float32    sum {t:10.1f}   0.00   0.00      0")
        base = tmp_path / f"daemon_{hosts}x1.r1"
        (base.parent / (base.name + ".out")).write_text(
            "# allreducectl bench (synthetic)\n" + "\n".join(rows) + "\n")
        (base.parent / (base.name + ".rc")).write_text("0\n")
        (base.parent / (base.name + ".err")).write_text("")


def test_fit_recovers_known_parameters(tmp_path):
    write_logs(tmp_path, [2, 4, 8], SIZES)
    points = cost_model.measured_points(str(tmp_path))
    assert sorted(points) == [2, 4, 8]
    text = cost_model.report(points, 65536, CORES)
    assert "c = 300.0 us, alpha = 150.0 us" in text
    assert "c = 400.0 us, alpha = 90.0 us" in text
    # Every checked point: error +0%.
    errors = [l.rsplit("|", 2)[1].strip() for l in text.splitlines()
              if l.startswith("| ") and l.endswith("% |")]
    assert errors and all(e in ("+0%", "-0%") for e in errors), errors
    assert "| 1000 |" in text


def test_residuals_show_a_point_the_model_misses(tmp_path):
    # 8 hosts measured 50% slower than the model everywhere: the fit cannot follow it, and the
    # report says so in that row.
    write_logs(tmp_path, [2, 4, 8], SIZES, noise=lambda h, s: 1.5 if h == 8 else 1.0)
    text = cost_model.report(cost_model.measured_points(str(tmp_path)), 65536, CORES)
    rows8 = [l for l in text.splitlines() if l.startswith("| 8 |")]
    assert rows8 and all(not l.endswith("| +0% |") for l in rows8), rows8


def test_sharing_slows_the_fit_not_the_projection(tmp_path):
    # Times measured with 8 hosts on 2 cores are 4x the dedicated hosts' alpha/beta terms: the
    # fit recovers the dedicated parameters, and the projection at 8 hosts is the dedicated time.
    write_logs(tmp_path, [2, 4, 8], SIZES)
    text = cost_model.report(cost_model.measured_points(str(tmp_path)), 65536, CORES)
    size = 64 << 20
    dedicated = cost_model.predict(KNOWN["ring"], "ring", 8, size)
    shared = cost_model.predict(KNOWN["ring"], "ring", 8, size, CORES)
    assert shared > 3 * dedicated
    projection = text.split("## Projection")[1]
    row8 = next(l for l in projection.splitlines() if l.startswith("| 8 | "))
    assert f"| {dedicated:.0f} (" in row8, row8
    assert cost_model.sharing(8, 2) == 4 and cost_model.sharing(2, 2) == 1


def test_rounds_follow_the_fold():
    assert [cost_model.rounds(h) for h in (2, 3, 4, 5, 8, 1000)] == [1, 3, 2, 4, 3, 11]


def test_too_few_points_is_a_clear_error(tmp_path):
    write_logs(tmp_path, [2, 4], [4, 1 << 20])
    proc = subprocess.run([sys.executable, cost_model.__file__, "--logs", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "do not determine c, alpha and beta" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, cost_model.__file__, "--logs", str(empty)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "needs at least two" in proc.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
