"""bench/make_results.py: the Targets section judges each target from the run's medians (met,
or missed by how much), and a case that did not run yields no verdict."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_results  # noqa: E402

MIB = 1 << 20


def write_case(tmp_path, name, times_us, busbw=None):
    """One repeat of a case: {size: time_us}; busbw defaults to algbw * 2(n-1)/n with n = 2."""
    rows = []
    for size, t in sorted(times_us.items()):
        bw = busbw.get(size, 0.0) if busbw else size / t / 1e3
        rows.append(f"{size:12d} {size // 4:12d}  float32    sum {t:10.1f}   0.00 {bw:6.2f}      0")
    (tmp_path / f"{name}.r1.out").write_text("# synthetic\n" + "\n".join(rows) + "\n")
    (tmp_path / f"{name}.r1.rc").write_text("0\n")
    (tmp_path / f"{name}.r1.err").write_text("")


def run(tmp_path, cases):
    out = tmp_path / "RESULTS.md"
    subprocess.run([sys.executable, make_results.__file__, "--logs", str(tmp_path), "--out",
                    str(out), "--sizes", "4:64M", "--cases", ",".join(cases), "--warmup", "1",
                    "--iters", "1", "--repeat", "1", "--elapsed_s", "1", "--source", "test"],
                   check=True)
    return out.read_text()


def test_targets_met_and_missed(tmp_path):
    # 2x1 is twice as fast as Gloo np2 at 1 MiB, 20% slower at 16 MiB; 4 B 50 us (met) at 2x1.
    write_case(tmp_path, "daemon_2x1", {4: 50.0, MIB: 500.0, 16 * MIB: 12000.0, 64 * MIB: 40000.0},
               busbw={64 * MIB: 1.68})
    write_case(tmp_path, "gloo_2", {4: 80.0, MIB: 1000.0, 16 * MIB: 10000.0, 64 * MIB: 40000.0})
    write_case(tmp_path, "daemon_4x1", {4: 180.0})
    write_case(tmp_path, "gloo_4", {4: 100.0})
    text = run(tmp_path, ["daemon_2x1", "daemon_4x1", "gloo_2", "gloo_4"])
    section = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
    assert "| daemon 2x1 busbw at 1 MiB >= best TCP peer | 2.00x | met |" in section
    assert "| daemon 2x1 busbw at 16 MiB >= best TCP peer | 0.83x | missed by 17% |" in section
    assert "| daemon 2x1 busbw at 64 MiB >= 1.3 GB/s | 1.68 GB/s | met |" in section
    assert "| daemon 2x1 4 B time <= 60 us | 50.0 us | met |" in section
    assert "| daemon 4x1 4 B time <= 150 us | 180.0 us | missed by 20% |" in section
    # daemon_2x2 did not run: no verdict about it.
    assert "2x2" not in section


def test_small_sizes_pass_replaces_first_pass_rows(tmp_path):
    # run_peers.sh appends a second table (the small sizes, more iterations) to the same .out.
    write_case(tmp_path, "daemon_2x1", {4: 400.0, MIB: 500.0})
    with open(tmp_path / "daemon_2x1.r1.out", "a") as f:
        f.write("# synthetic\n" f"{4:12d} {1:12d}  float32    sum {55.0:10.1f}   0.00   0.00      0\n")
    write_case(tmp_path, "gloo_2", {4: 80.0, MIB: 1000.0})
    text = run(tmp_path, ["daemon_2x1", "gloo_2"])
    assert "| daemon 2x1 4 B time <= 60 us | 55.0 us | met |" in text
    assert "| daemon 2x1 busbw at 1 MiB >= best TCP peer | 2.00x | met |" in text


def test_shm_variant_and_2x2_factor(tmp_path):
    # The _shm variant is judged by its base case's targets; 2x2 wants 1.5x the peer at 16 MiB.
    write_case(tmp_path, "daemon_2x2", {16 * MIB: 10000.0})
    write_case(tmp_path, "daemon_2x1_shm", {MIB: 400.0})
    write_case(tmp_path, "gloo_2", {MIB: 1000.0})
    write_case(tmp_path, "gloo_4", {16 * MIB: 12000.0})
    text = run(tmp_path, ["daemon_2x2", "daemon_2x1_shm", "gloo_2", "gloo_4"])
    section = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
    assert "| daemon 2x2 busbw at 16 MiB >= 1.5x best TCP peer | 1.20x | missed by 20% |" in section
    assert "| daemon 2x1 shm busbw at 1 MiB >= best TCP peer | 2.50x | met |" in section
    assert "--device shm" in text
