"""A small local launcher: starts --np processes per daemon socket with the rank variables the
client library reads, prefixes every output line with the process's rank, and fails fast (kills the
others, exits with the failing process's code) when one process fails.

    python -m allreduced.launch --sockets /run/a.sock,/run/b.sock --np 2 [--job NAME] -- CMD ...

Ranks are host-major (socket i, local rank l -> rank i * np + l). On a real cluster use your
launcher instead (`mpirun -np N -npernode K python train.py`, `srun ...`): the client library reads
OMPI_COMM_WORLD_*, PMI_*, SLURM_* and HOROVOD_* variables itself and names the job after the launch
(ALLREDUCED_JOB overrides; MPICH's mpiexec needs it); each node's daemon listens on
/run/allreduced/allreduced.sock.
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time


def _pump(stream, prefix, out_lock):
    for line in iter(stream.readline, b""):
        with out_lock:
            sys.stdout.buffer.write(prefix + line)
            sys.stdout.buffer.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m allreduced.launch")
    parser.add_argument("--sockets", required=True, help="daemon sockets, one per host")
    parser.add_argument("--np", type=int, default=1, help="processes per daemon")
    parser.add_argument("--job", default=f"launch-{os.getpid()}", help="job name")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.np < 1:
        parser.error("give --np >= 1 and a command after --")
    sockets = [s for s in args.sockets.split(",") if s]
    size = len(sockets) * args.np
    out_lock = threading.Lock()
    procs, pumps = [], []
    for host, sock in enumerate(sockets):
        for local in range(args.np):
            rank = host * args.np + local
            env = dict(os.environ, ALLREDUCED_SOCKET=sock, ALLREDUCED_JOB=args.job,
                       ALLREDUCED_RANK=str(rank), ALLREDUCED_SIZE=str(size),
                       ALLREDUCED_LOCAL_RANK=str(local), ALLREDUCED_LOCAL_SIZE=str(args.np))
            p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            t = threading.Thread(target=_pump, args=(p.stdout, f"[{rank}] ".encode(), out_lock),
                                 daemon=True)
            t.start()
            procs.append(p)
            pumps.append(t)
    status = 0
    running = set(range(size))
    while running:
        for i in list(running):
            code = procs[i].poll()
            if code is None:
                continue
            running.discard(i)
            if code != 0 and status == 0:
                status = code if code > 0 else 128 - code
                sys.stderr.write(f"allreduced.launch: rank {i} exited with {code}; "
                                 "stopping the others\n")
                for j in running:
                    os.killpg(procs[j].pid, signal.SIGTERM)
        time.sleep(0.05)
    for t in pumps:
        t.join(timeout=5)
    return status


if __name__ == "__main__":
    sys.exit(main())
