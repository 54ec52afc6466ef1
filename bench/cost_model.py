#!/usr/bin/env python3
"""An alpha-beta cost model of allreduced's cross-host allreduce, fitted to bench/run_peers.sh.

The model follows the selection table of daemon/dataplane/tcp/algorithms.h (H hosts, one rank
each, m bytes per rank):
  recursive doubling (m < ring threshold): T = c + r(H) * (alpha + m * beta)
      r(H) = log2(p) + 2 when H is not a power of two p (fold in, fold out), else log2(H)
  pipelined ring (m >= threshold):         T = c + 2 (H - 1) * alpha + 2 (H - 1) / H * m * beta
c is what every collective pays whatever the host count: the client's submit and completion,
the local stage and the steady state's readiness round.

Loopback on this machine is not a network: every simulated host shares the same few cores, so
where a real cluster runs its H hosts' steps side by side, here they take turns. The fit
therefore scales the alpha and beta terms by s(H) = max(1, H / cores), the hosts per core
(`--cores`, default this machine's), and the projection to 2..1,000 hosts uses s = 1: hosts
with cores of their own, each link as fast as one measured here between two hosts.

Each path's three parameters are fitted by least squares to the daemon_Hx1 cases of one run's
logs (median time per size), and the model is checked point by point against what was measured
at every host count present (2, 4 and 8). Then it projects the chosen algorithms' cost from 2 to
1,000 hosts. The residuals show what the model does not capture.

  bench/cost_model.py --logs DIR [--threshold 65536] [--cores N] [--out FILE]
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_results import human, parse_case  # noqa: E402

PROJECTED_HOSTS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
PROJECTED_SIZES = (4, 1 << 20, 16 << 20, 64 << 20)


def rounds(hosts):
    p = 1 << (hosts.bit_length() - 1)
    return int(math.log2(p)) + (2 if p != hosts else 0)


def sharing(hosts, cores):
    """s(H): how many simulated hosts share each core (1 with a core or more per host)."""
    return max(1.0, hosts / cores) if cores else 1.0


def features(path, hosts, size, cores=0):
    """The coefficients of (c, alpha, beta) in the model's time for one point; cores=0: hosts
    with cores of their own (no sharing)."""
    s = sharing(hosts, cores)
    if path == "rd":
        r = rounds(hosts)
        return (1.0, s * r, s * r * size)
    return (1.0, s * 2.0 * (hosts - 1), s * 2.0 * (hosts - 1) / hosts * size)


def least_squares(rows, times):
    """Solves the normal equations (A^T A) x = A^T t for three unknowns (Gaussian elimination);
    points are weighted by 1/t so that small and large times count alike (relative error)."""
    n = len(rows[0])
    ata = [[0.0] * n for _ in range(n)]
    att = [0.0] * n
    for row, t in zip(rows, times):
        w = 1.0 / (t * t)
        for i in range(n):
            att[i] += w * row[i] * t
            for j in range(n):
                ata[i][j] += w * row[i] * row[j]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(ata[r][col]))
        if abs(ata[pivot][col]) < 1e-30:
            raise ValueError("singular")
        ata[col], ata[pivot] = ata[pivot], ata[col]
        att[col], att[pivot] = att[pivot], att[col]
        for r in range(n):
            if r != col:
                f = ata[r][col] / ata[col][col]
                ata[r] = [a - f * b for a, b in zip(ata[r], ata[col])]
                att[r] -= f * att[col]
    return [att[i] / ata[i][i] for i in range(n)]


def predict(params, path, hosts, size, cores=0):
    return sum(p * f for p, f in zip(params, features(path, hosts, size, cores)))


def measured_points(logs):
    """{hosts: {size: time_us}} of every daemon_Hx1 case with a successful run in `logs`."""
    points = {}
    for name in sorted(os.listdir(logs)):
        if not (name.startswith("daemon_") and name.endswith(".r1.rc")):
            continue
        case = name[:-len(".r1.rc")]
        hosts, per_host = case[len("daemon_"):].split("x")
        if per_host != "1" or int(hosts) < 2:
            continue
        rows = parse_case(logs, case)["rows"]
        if rows:
            points[int(hosts)] = {size: row[0] for size, row in rows.items()}
    return points


def report(points, threshold, cores):
    lines = ["# Alpha-beta model of the cross-host allreduce (bench/cost_model.py)", "",
             f"Fitted to the daemon_Hx1 cases at {', '.join(map(str, sorted(points)))} hosts; "
             f"recursive doubling below {human(threshold)}, the pipelined ring from there. "
             "Times in us; error = model / measured - 1. "
             f"The measured hosts shared {cores} cores: alpha and beta are scaled by "
             f"s(H) = max(1, H / {cores}) in the fit (model column) and not in the projection "
             "(hosts with cores of their own).", ""]
    fitted = {}
    for path, title in (("rd", "recursive doubling"), ("ring", "pipelined ring")):
        sample = [(h, s, t) for h, rows in points.items() for s, t in rows.items()
                  if (s < threshold) == (path == "rd") and t > 0]
        try:
            params = least_squares([features(path, h, s, cores) for h, s, _ in sample],
                                   [t for _, _, t in sample])
        except (ValueError, IndexError):
            raise ValueError(f"the {title} points ({len(sample)}: "
                             f"{sorted({h for h, _, _ in sample})} hosts, "
                             f"{sorted({human(s) for _, s, _ in sample})}) do not determine c, "
                             "alpha and beta: they need two or more sizes at two or more host "
                             "counts (run_peers.sh --sizes 4:256M)") from None
        fitted[path] = params
        c, alpha, beta = params
        lines += [f"## {title}", "",
                  f"c = {c:.1f} us, alpha = {alpha:.1f} us, beta = {beta * 1e3:.4f} us/KB "
                  f"({1e-3 / beta if beta > 0 else float('inf'):.2f} GB/s per link)", "",
                  "| hosts | size | measured | model | error |", "|---|---|---|---|---|"]
        for h, s, t in sorted(sample):
            if s in (4, 1024, 16 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20):
                m = predict(params, path, h, s, cores)
                lines.append(f"| {h} | {human(s)} | {t:.1f} | {m:.1f} | {m / t - 1:+.0%} |")
        lines.append("")
    lines += ["## Projection (model time in us, busbw in GB/s)", "",
              "| hosts | " + " | ".join(human(s) for s in PROJECTED_SIZES) + " |",
              "|---|" + "---|" * len(PROJECTED_SIZES)]
    for h in PROJECTED_HOSTS:
        cells = []
        for s in PROJECTED_SIZES:
            path = "rd" if s < threshold else "ring"
            t = predict(fitted[path], path, h, s)
            busbw = s / (t * 1e3) * 2 * (h - 1) / h
            cells.append(f"{t:.0f}" if s < 4096 else f"{t:.0f} ({busbw:.2f})")
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logs", required=True, help="a bench/run_peers.sh log directory")
    ap.add_argument("--threshold", type=int, default=64 << 10,
                    help="cross_host_ring_threshold_bytes of the measured daemons")
    ap.add_argument("--cores", type=int, default=os.cpu_count(),
                    help="cores the measured daemons shared (default: this machine's)")
    ap.add_argument("--out", help="write the report here (default: stdout)")
    args = ap.parse_args()
    points = measured_points(args.logs)
    if len(points) < 2:
        sys.exit(f"cost_model: {args.logs} has daemon_Hx1 results for {sorted(points) or 'no'} "
                 "host counts; the model needs at least two (run_peers.sh --cases "
                 "daemon_2x1,daemon_4x1,daemon_8x1)")
    try:
        text = report(points, args.threshold, args.cores)
    except ValueError as e:
        sys.exit(f"cost_model: {e}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
