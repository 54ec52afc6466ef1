#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the logs of bench/run_peers.sh.

Each repeat k of a case left <case>.r<k>.out (nccl-tests-style tables, one per pass: '#' comment
lines, then rows whose columns 0, 4 and 6 are size (B), time (us) and busbw (GB/s); a size of a
later pass, the small sizes measured again with more iterations, replaces the earlier row),
<case>.r<k>.err and <case>.r<k>.rc in the log directory. Per size the report takes the median time over the repeats
that have that size (and that row's busbw). Ratios are computed from times (best peer time /
daemon time at the same process count), which equals the busbw ratio and stays meaningful where
busbw rounds to 0.00.
"""
import argparse
import datetime
import glob
import os
import platform
import re


def case_info(name):
    """(title, process count, command) of a run_peers.sh case name."""
    m = re.fullmatch(r"daemon_(\d+)x(\d+)(_shm)?", name)
    if m:
        hosts, per_host, shm = int(m.group(1)), int(m.group(2)), bool(m.group(3))
        socks = ",".join(f"h{i}" for i in range(hosts))
        return (f"daemon {hosts}x{per_host}{' shm' if shm else ''}", hosts * per_host,
                f"{hosts} daemon{'s' if hosts > 1 else ''}; allreducectl bench --sockets {socks} "
                f"--np {per_host}{' --device shm' if shm else ''}")
    kind, np = name.rsplit("_", 1)
    np = int(np)
    if kind == "gloo":
        return (f"Gloo np{np}", np,
                f"gloo_allreduce_bench --np {np} (best of ring, chunked, halving-doubling)")
    if kind == "mpi_tcp":
        return (f"MPI TCP np{np}", np, f"mpirun -np {np} --mca btl tcp,self "
                "--mca btl_tcp_if_include lo mpi_allreduce_bench")
    return (f"MPI vader np{np}", np, f"mpirun -np {np} --mca btl vader,self mpi_allreduce_bench")


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def parse_run(logs, run, gloo):
    out = read(os.path.join(logs, run + ".out"))
    rows, comments = {}, []
    for line in out.splitlines():
        if line.startswith("#"):
            comments.append(line)
            continue
        f = line.split()
        if len(f) >= 7 and f[0].isdigit():
            rows[int(f[0])] = (float(f[4]), float(f[6]), f[-1] if gloo else "")
    rc = read(os.path.join(logs, run + ".rc"), "missing").strip()
    return {"rows": rows, "rc": rc, "err": read(os.path.join(logs, run + ".err")).strip(),
            "out": out.rstrip(), "comments": comments, "run": run}


def parse_case(logs, name):
    """{'rows': {size: (median time_us, busbw, extra)}, 'rc', 'err', 'out', 'comments',
    'runs'}: rc is the worst repeat's, err/out those of the first failing (else last) repeat."""
    runs = sorted((os.path.basename(p)[:-len(".rc")] for p in
                   glob.glob(os.path.join(logs, name + ".r*.rc")) if ".try1." not in p),
                  key=lambda r: int(r.rsplit(".r", 1)[1]))
    parsed = [parse_run(logs, r, name.startswith("gloo")) for r in runs]
    rows = {}
    for size in sorted(set().union(*(p["rows"].keys() for p in parsed))):
        at = sorted((p["rows"][size] for p in parsed if size in p["rows"]), key=lambda r: r[0])
        rows[size] = at[(len(at) - 1) // 2]  # the median (the lower one of an even count)
    failing = [p for p in parsed if p["rc"] != "0"]
    shown = failing[0] if failing else (parsed[-1] if parsed else None)
    return {"rows": rows, "rc": shown["rc"] if shown else "missing",
            "err": shown["err"] if shown else "", "out": shown["out"] if shown else "",
            "comments": shown["comments"] if shown else [], "runs": runs}


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


# The targets bench/RESULTS.md is judged by (issue 28): busbw of each cross-host case against the
# best TCP peer's at its process count (at least the given factor), a floor on 2-host busbw at
# 64 MiB, and a ceiling on 4-byte time. A case's `_shm` variant (inputs built in shared memory,
# results read in place: `allreducectl bench --device shm`) is judged by the same targets.
BUSBW_VS_PEER = tuple((c, s, 1.0) for c in ("daemon_2x1", "daemon_4x1")
                      for s in (1 << 20, 16 << 20, 64 << 20)) + (
    ("daemon_2x2", 1 << 20, 1.0), ("daemon_2x2", 16 << 20, 1.5), ("daemon_2x2", 64 << 20, 1.5))
BUSBW_FLOOR = (("daemon_2x1", "daemon_2x2"), 64 << 20, 1.3)
LATENCY_CEILING_US = (("daemon_2x1", 60.0), ("daemon_2x2", 80.0), ("daemon_4x1", 150.0))


def with_variants(names, cases):
    """Each target case that ran, then its _shm variant if that ran."""
    return [v for n in names for v in (n, n + "_shm") if v in cases]


def target_rows(cases, info, compared):
    """(target, measured, verdict) for every target whose case ran."""
    rows = []
    for base, s, factor in BUSBW_VS_PEER:
        for d in with_variants([base], cases):
            got = ratio(cases, d, compared(d), s)
            if got == "-":
                continue
            g = float(got)
            verdict = "met" if g >= factor else f"missed by {(1 - g / factor) * 100:.0f}%"
            want = "best TCP peer" if factor == 1.0 else f"{factor}x best TCP peer"
            rows.append((f"{info[d][0]} busbw at {human(s)} >= {want}", f"{got}x", verdict))
    names, size, floor = BUSBW_FLOOR
    for d in (n for n in with_variants(names, cases) if size in cases[n]["rows"]):
        got = cases[d]["rows"][size][1]
        verdict = "met" if got >= floor else f"missed by {(1 - got / floor) * 100:.0f}%"
        rows.append((f"{info[d][0]} busbw at {human(size)} >= {floor} GB/s", f"{got:.2f} GB/s",
                     verdict))
    for base, ceiling in LATENCY_CEILING_US:
        for d in with_variants([base], cases):
            if 4 not in cases[d]["rows"]:
                continue
            got = cases[d]["rows"][4][0]
            verdict = "met" if got <= ceiling else f"missed by {(got / ceiling - 1) * 100:.0f}%"
            rows.append((f"{info[d][0]} 4 B time <= {ceiling:.0f} us", f"{got:.1f} us", verdict))
    return rows


def machine_line():
    cpu = next((l.split(":", 1)[1].strip() for l in read("/proc/cpuinfo").splitlines()
                if l.startswith("model name")), "?")
    return (f"- Machine: {os.cpu_count()} vCPUs ({cpu}), kernel {platform.release()}; load average "
            f"at the end {' '.join(read('/proc/loadavg').split(' ')[:3])} (shared machine)")


def retry_notes(logs, run, title):
    """The failed first attempt of a daemon run that run_peers.sh retried, verbatim."""
    prefix = os.path.join(logs, run + ".try1.")
    if not os.path.exists(prefix + "rc"):
        return []
    lines = ["", f"{title} ({run}): the first attempt failed (exit {read(prefix + 'rc').strip()}) "
             "and was retried; its stderr verbatim:", "", "```",
             read(prefix + "err").strip()[-4000:] or "(empty)", "```"]
    sigterm = [f"{h}: {l}" for h in sorted(os.listdir(logs))
               if h.startswith(run + ".try1.h") and h.endswith(".log")
               for l in read(os.path.join(logs, h)).splitlines() if "received SIG" in l]
    if sigterm:
        lines += ["", "Its daemons' logs (run_peers.sh stops daemons only after a case ends):", "",
                  "```"] + sigterm + ["```"]
    return lines


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--logs", "--out", "--sizes", "--cases", "--warmup", "--iters", "--repeat",
                 "--elapsed_s", "--source"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--small_sizes", default="")
    ap.add_argument("--small_iters", type=int, default=0)
    a = ap.parse_args()
    names = a.cases.split(",")
    info = {n: case_info(n) for n in names}
    daemons = [n for n in names if n.startswith("daemon_")]
    peers = [n for n in names if not n.startswith("daemon_")]
    tcp_peers = [n for n in peers if not n.startswith("mpi_vader")]
    cases = {n: parse_case(a.logs, n) for n in names}
    sizes = sorted(set().union(*(c["rows"].keys() for c in cases.values())))

    def compared(d):
        """The peers a daemon case is compared with: TCP peers at its process count (any peer
        at its count for a single-host case, whose data stays in shared memory)."""
        np = info[d][1]
        pool = peers if d.startswith("daemon_1x") else tcp_peers
        return [p for p in pool if info[p][1] == np]

    md = ["# allreduced vs. Gloo and Open MPI on one machine (bench/run_peers.sh)", "",
          f"- Run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {a.elapsed_s} s; "
          f"sizes {a.sizes} per rank, warmup {a.warmup}, iters {a.iters}, repeat {a.repeat} "
          "(median time per size), --check everywhere; float32 sum, all on loopback" +
          (f"; sizes {a.small_sizes} measured again in each run with {a.small_iters} iterations "
           "(those rows are theirs)" if a.small_iters > 0 else ""),
          machine_line(), f"- Source: {a.source}",
          "- time = the slowest rank's mean iteration; busbw = algbw * 2(n-1)/n (nccl-tests), "
          "GB/s = 1e9 B/s. Noisy: 2 vCPUs shared with other work, 4-8 processes oversubscribe "
          "them; differences under ~20% are noise (shared/MEASUREMENTS.md).", "",
          "## Cases", "", "| case | processes | what ran | exit | notes |", "|---|---|---|---|---|"]
    for n in names:
        c = cases[n]
        notes = list(dict.fromkeys(l.lstrip("# ") for l in c["comments"]
                                   if "teardown" in l or "Out of bounds" in l))
        if c["rc"] != "0" and c["err"]:
            notes.append("error below")
        if any(os.path.exists(os.path.join(a.logs, r + ".try1.rc")) for r in c["runs"]):
            notes.append("a first attempt failed, retried (below)")
        md.append(f"| {info[n][0]} | {info[n][1]} | {info[n][2]} | {c['rc']} | "
                  f"{'; '.join(notes) or '-'} |")
    for n in names:
        c = cases[n]
        if c["rc"] != "0" or (c["err"] and not c["rows"]):
            md += ["", f"{info[n][0]} failed (exit {c['rc']}); stderr verbatim:", "", "```",
                   c["err"][-4000:] or "(empty)", "```"]
    for n in daemons:
        for r in cases[n]["runs"]:
            md += retry_notes(a.logs, r, info[n][0])

    headline = [s for s in (1 << 20, 16 << 20, 64 << 20, 256 << 20) if s in sizes]
    md += ["", "## Headline", "",
           "| case | 4 B time (us) | " + " | ".join(f"busbw {human(s)}" for s in headline) + " |",
           "|---|---|" + "---|" * len(headline)]
    for n in names:
        md.append(f"| {info[n][0]} | {cell(cases, n, 4, 0)} | " +
                  " | ".join(cell(cases, n, s, 1) for s in headline) + " |")

    md += ["", "## busbw (GB/s) per size, and daemon / best peer", "",
           "Ratios are daemon busbw / best peer busbw at the same process count (> 1: the daemon "
           "is faster): cross-host daemon cases against the TCP peers (Gloo, MPI TCP), a "
           "single-host case (shared memory inside the daemon) against every peer.", "",
           "| size | " + " | ".join(info[n][0] for n in names) + " | " +
           " | ".join(f"{info[d][0][7:]} / peer" for d in daemons) + " |",
           "|" + "---|" * (len(names) + len(daemons) + 1)]
    for s in sizes:
        md.append(f"| {human(s)} | " + " | ".join(cell(cases, n, s, 1) for n in names) + " | " +
                  " | ".join(ratio(cases, d, compared(d), s) for d in daemons) + " |")

    latency_sizes = [s for s in (4, 1024, 65536) if s in sizes]
    md += ["", "## Small tensors: time (us)", "",
           "| case | " + " | ".join(human(s) for s in latency_sizes) + " |",
           "|---|" + "---|" * len(latency_sizes)]
    for n in names:
        md.append(f"| {info[n][0]} | " + " | ".join(cell(cases, n, s, 0) for s in latency_sizes)
                  + " |")

    targets = target_rows(cases, info, compared)
    if targets:
        md += ["", "## Targets", "",
               "Measured in this run; bench/RESULTS_WHY.md (below) says why each missed one is "
               "missed, with the profile.", "", "| target | measured | verdict |", "|---|---|---|"]
        md += [f"| {t} | {m} | {v} |" for t, m, v in targets]
    why = read(os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS_WHY.md"))
    if why:
        md += ["", "<!-- from bench/RESULTS_WHY.md (hand-written; not generated) -->", "",
               ("#" + why.strip()) if why.startswith("# ") else why.strip()]

    md += ["", "## Raw tables (the first failing repeat, else the last)", ""]
    for n in names:
        md += [f"### {info[n][0]}: {info[n][2]}", "", "```", cases[n]["out"] or "(no output)",
               "```", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(md).rstrip() + "\n")


if __name__ == "__main__":
    main()
