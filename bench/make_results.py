#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the logs of bench/run_peers.sh.

Each case left <case>.out (an nccl-tests-style table: '#' comment lines, then rows whose columns
0, 4 and 6 are size (B), time (us) and busbw (GB/s)), <case>.err and <case>.rc in the log
directory. Ratios are computed from times (best peer time / daemon time), which equals the busbw
ratio at a given size and process count and stays meaningful where busbw rounds to 0.00.
"""
import argparse
import datetime
import os
import platform

DAEMON_CASES = [("daemon_1x4", "daemon 1x4"), ("daemon_2x2", "daemon 2x2"),
                ("daemon_4x1", "daemon 4x1")]
PEER_CASES = [("gloo", "Gloo"), ("mpi_tcp", "MPI TCP"), ("mpi_vader", "MPI vader")]
TCP_PEERS = ("gloo", "mpi_tcp")
COMMANDS = {
    "daemon_1x4": "1 daemon; allreducectl bench --sockets h0 --np 4",
    "daemon_2x2": "2 daemons; allreducectl bench --sockets h0,h1 --np 2",
    "daemon_4x1": "4 daemons; allreducectl bench --sockets h0,h1,h2,h3 --np 1",
    "gloo": "gloo_allreduce_bench --np 4 (best of ring, chunked, halving-doubling)",
    "mpi_tcp": "mpirun -np 4 --mca btl tcp,self --mca btl_tcp_if_include lo mpi_allreduce_bench",
    "mpi_vader": "mpirun -np 4 --mca btl vader,self mpi_allreduce_bench",
}


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def parse_case(logs, name):
    """{'rows': {size: (time_us, busbw, extra)}, 'rc', 'err', 'out', 'comments'}."""
    out = read(os.path.join(logs, name + ".out"))
    rows, comments = {}, []
    for line in out.splitlines():
        if line.startswith("#"):
            comments.append(line)
            continue
        f = line.split()
        if len(f) >= 7 and f[0].isdigit():
            rows[int(f[0])] = (float(f[4]), float(f[6]), f[-1] if name == "gloo" else "")
    rc = read(os.path.join(logs, name + ".rc"), "missing").strip()
    return {"rows": rows, "rc": rc, "err": read(os.path.join(logs, name + ".err")).strip(),
            "out": out.rstrip(), "comments": comments}


def human(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}iB"
    return f"{size} B"


def ratio(cases, daemon, peers, size):
    d = cases[daemon]["rows"].get(size)
    times = [cases[p]["rows"][size][0] for p in peers if size in cases[p]["rows"]]
    if not d or not times or d[0] <= 0:
        return "-"
    return f"{min(times) / d[0]:.2f}"


def cell(cases, name, size, column):
    row = cases[name]["rows"].get(size)
    if not row:
        return "-"
    return f"{row[column]:.2f}" if column == 1 else f"{row[column]:.1f}"


def machine_line():
    cpu = next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines()
                if l.startswith("model name")), "?")
    return (f"- Machine: {os.cpu_count()} vCPUs ({cpu}), kernel {platform.release()}; load average "
            f"at the end {' '.join(read('/proc/loadavg').split(' ')[:3])} (shared machine)")


def retry_notes(logs, name, title):
    """The failed first attempt of a daemon case that run_peers.sh retried, verbatim."""
    prefix = os.path.join(logs, name + ".try1.")
    if not os.path.exists(prefix + "rc"):
        return []
    lines = ["", f"{title}: the first attempt failed (exit {read(prefix + 'rc').strip()}) and was "
             "retried; its stderr verbatim:", "", "```", read(prefix + "err").strip()[-4000:]
             or "(empty)", "```"]
    sigterm = [f"{h}: {l}" for h in sorted(os.listdir(logs))
               if h.startswith(name + ".try1.h") and h.endswith(".log")
               for l in read(os.path.join(logs, h)).splitlines() if "received SIG" in l]
    if sigterm:
        lines += ["", "Its daemons' logs (run_peers.sh stops daemons only after a case ends):", "",
                  "```"] + sigterm + ["```"]
    return lines


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--logs", "--out", "--sizes", "--warmup", "--iters", "--elapsed_s", "--source"):
        ap.add_argument(flag, required=True)
    a = ap.parse_args()
    names = [n for n, _ in DAEMON_CASES + PEER_CASES]
    titles = dict(DAEMON_CASES + PEER_CASES)
    cases = {n: parse_case(a.logs, n) for n in names}
    sizes = sorted(set().union(*(c["rows"].keys() for c in cases.values())))
    md = ["# allreduced vs. Gloo and Open MPI on one machine (bench/run_peers.sh)", "",
          f"- Run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {a.elapsed_s} s; "
          f"sizes {a.sizes} per rank, warmup {a.warmup}, iters {a.iters}, --check everywhere; "
          "float32 sum, 4 processes in every case, all on loopback", machine_line(),
          f"- Source: {a.source}",
          "- time = the slowest rank's mean iteration; busbw = algbw * 2(n-1)/n (nccl-tests), "
          "GB/s = 1e9 B/s. Noisy: 2 vCPUs shared with other work, 4 processes oversubscribe them; "
          "differences under ~20% are noise (shared/MEASUREMENTS.md).", "",
          "## Cases", "", "| case | what ran | exit | notes |", "|---|---|---|---|"]
    for n in names:
        c = cases[n]
        notes = [l.lstrip("# ") for l in c["comments"] if "teardown" in l or "Out of bounds" in l]
        if c["rc"] != "0" and c["err"]:
            notes.append("error below")
        if os.path.exists(os.path.join(a.logs, n + ".try1.rc")):
            notes.append("first attempt failed, retried (below)")
        md.append(f"| {titles[n]} | {COMMANDS[n]} | {c['rc']} | {'; '.join(notes) or '-'} |")
    for n in names:
        c = cases[n]
        if c["rc"] != "0" or (c["err"] and not c["rows"]):
            md += ["", f"{titles[n]} failed (exit {c['rc']}); stderr verbatim:", "", "```",
                   c["err"][-4000:] or "(empty)", "```"]
    for n, title in DAEMON_CASES:
        md += retry_notes(a.logs, n, title)

    headline = [s for s in (1 << 20, 16 << 20, 256 << 20) if s in sizes]
    md += ["", "## Headline (the shape of shared/MEASUREMENTS.md's peers table)", "",
           "| case | 4 B time (us) | " + " | ".join(f"busbw {human(s)}" for s in headline) + " |",
           "|---|---|" + "---|" * len(headline)]
    for n in names:
        md.append(f"| {titles[n]} | {cell(cases, n, 4, 0)} | " +
                  " | ".join(cell(cases, n, s, 1) for s in headline) + " |")

    md += ["", "## busbw (GB/s) per size, and daemon / best peer", "",
           "Ratios are daemon busbw / best peer busbw (> 1: the daemon is faster). Cross-host "
           "daemon cases (2x2, 4x1) are compared with the best TCP peer (Gloo, MPI TCP); the "
           "single-host case (1x4, shared memory inside the daemon) with the best of all three.",
           "", "| size | " + " | ".join(titles[n] for n in names) +
           " | Gloo algo | 2x2 / TCP peer | 4x1 / TCP peer | 1x4 / any peer |",
           "|" + "---|" * (len(names) + 5)]
    for s in sizes:
        g = cases["gloo"]["rows"].get(s)
        md.append(f"| {human(s)} | " + " | ".join(cell(cases, n, s, 1) for n in names) +
                  f" | {g[2] if g else '-'} | {ratio(cases, 'daemon_2x2', TCP_PEERS, s)} | "
                  f"{ratio(cases, 'daemon_4x1', TCP_PEERS, s)} | "
                  f"{ratio(cases, 'daemon_1x4', [n for n, _ in PEER_CASES], s)} |")

    latency_sizes = [s for s in (4, 1024, 65536) if s in sizes]
    md += ["", "## Small tensors: time (us)", "",
           "| case | " + " | ".join(human(s) for s in latency_sizes) + " |",
           "|---|" + "---|" * len(latency_sizes)]
    for n in names:
        md.append(f"| {titles[n]} | " + " | ".join(cell(cases, n, s, 0) for s in latency_sizes)
                  + " |")

    md += ["", "## Raw tables", ""]
    for n in names:
        md += [f"### {titles[n]}: {COMMANDS[n]}", "", "```", cases[n]["out"] or "(no output)",
               "```", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(md).rstrip() + "\n")


if __name__ == "__main__":
    main()
