"""On a GPU host: can one NCCL communicator have two ranks on the same GPU? Two fresh processes
(this file run as a script: CUDA is never used across fork()) each take GPU 0, join one
communicator with ncclCommInitRank and allreduce 64 Ki floats (1 + 2 = 3 everywhere). Case
"same host": NCCL sees two ranks with one bus id on one host; case "distinct NCCL_HOSTID": each
rank claims its own host (NCCL_HOSTID), so NCCL connects them over its socket transport on
loopback. Each case passes when the allreduce is exact and prints "NCCL ACCEPTED ...", is an
expected failure (XFAIL) printing "NCCL REFUSED ..." with NCCL's own words when NCCL refuses the
communicator, and fails on anything else (a crash, a hang, a wrong result). The daemon's plans
follow from this (docs/gpu.md): processes that share a GPU are reduced before the communicator.
libnccl.so.2 from $ARD_NCCL_DIR, else the library path, else /usr/local/cuda/lib64. Skipped with
"SKIPPED (no GPU)" elsewhere."""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

COUNT = 64 * 1024
NCCL_FLOAT32, NCCL_SUM = 7, 0


def load_nccl():
    for path in [os.path.join(os.environ.get("ARD_NCCL_DIR", ""), "libnccl.so.2"), "libnccl.so.2",
                 "/usr/local/cuda/lib64/libnccl.so.2"]:
        try:
            nccl = ctypes.CDLL(path)
        except OSError:
            continue
        nccl.ncclGetErrorString.restype = ctypes.c_char_p
        nccl.ncclGetLastError.restype = ctypes.c_char_p
        return nccl
    raise RuntimeError("no libnccl.so.2 (ARD_NCCL_DIR, library path, /usr/local/cuda/lib64)")


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def rank_main(rank, id_path):
    """One rank: exit 0 after an exact allreduce, 3 after NCCL refused (printed), 1 otherwise."""
    cuda = ctypes.CDLL("libcuda.so.1")
    nccl = load_nccl()

    def check(call, rc):
        if rc != 0:
            print(f"rank {rank}: {call}: CUDA error {rc}", flush=True)
            sys.exit(1)

    check("cuInit", cuda.cuInit(0))
    device, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0))
    check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device))
    check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(COUNT * 4)))
    host = (ctypes.c_float * COUNT)(*([rank + 1.0] * COUNT))
    check("cuMemcpyHtoD", cuda.cuMemcpyHtoD_v2(ptr, host, ctypes.c_size_t(COUNT * 4)))
    uid = UniqueId()
    if rank == 0:
        rc = nccl.ncclGetUniqueId(ctypes.byref(uid))
        if rc != 0:
            print(f"NCCL REFUSED ncclGetUniqueId: {nccl.ncclGetErrorString(rc).decode()}")
            sys.exit(3)
        with open(id_path + ".tmp", "wb") as f:
            f.write(bytes(uid))  # all 128 bytes (uid.internal would stop at a NUL)
        os.rename(id_path + ".tmp", id_path)
    else:
        while not os.path.exists(id_path):
            time.sleep(0.01)
        with open(id_path, "rb") as f:
            ctypes.memmove(ctypes.byref(uid), f.read(), 128)
    comm = ctypes.c_void_p()
    rc = nccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, rank)
    if rc != 0:
        last = nccl.ncclGetLastError(None) or b""
        print(f"NCCL REFUSED rank {rank}: ncclCommInitRank: {nccl.ncclGetErrorString(rc).decode()}"
              f": {last.decode(errors='replace').strip()}", flush=True)
        sys.exit(3)
    rc = nccl.ncclAllReduce(ctypes.c_void_p(ptr.value), ctypes.c_void_p(ptr.value),
                            ctypes.c_size_t(COUNT), NCCL_FLOAT32, NCCL_SUM, comm, None)
    if rc != 0:
        print(f"NCCL REFUSED rank {rank}: ncclAllReduce: {nccl.ncclGetErrorString(rc).decode()}")
        sys.exit(3)
    check("cuCtxSynchronize", cuda.cuCtxSynchronize())
    check("cuMemcpyDtoH", cuda.cuMemcpyDtoH_v2(host, ptr, ctypes.c_size_t(COUNT * 4)))
    wrong = sum(1 for v in host if v != 3.0)
    nccl.ncclCommDestroy(comm)
    print(f"rank {rank}: {wrong} wrong of {COUNT}", flush=True)
    sys.exit(0 if wrong == 0 else 1)


if __name__ == "__main__":
    rank_main(int(sys.argv[1]), sys.argv[2])

import pytest  # noqa: E402 (the rank processes above need only ctypes)

from gpu_host import skip_without_gpu  # noqa: E402


@pytest.mark.parametrize("case", ["same host", "distinct NCCL_HOSTID"])
def test_two_ranks_on_one_gpu(case):
    skip_without_gpu(f"nccl_one_gpu_test[{case}]")
    workdir = tempfile.mkdtemp(prefix="ard-nccl1.", dir="/tmp")
    procs = []
    for rank in range(2):
        env = dict(os.environ, NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1")
        if case != "same host":
            env["NCCL_HOSTID"] = f"ard-nccl-one-gpu-{rank}"
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(rank), os.path.join(workdir, "id")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out = p.communicate()[0] + "\n(timed out after 30 s)"
        outputs.append(out)
        codes.append(p.returncode)
    print("\n".join(outputs))
    refused = [line for out in outputs for line in out.splitlines()
               if line.startswith("NCCL REFUSED")]
    if codes == [0, 0]:
        print(f"NCCL ACCEPTED two ranks on GPU 0 ({case})")
        return
    if refused:
        print(f"NCCL REFUSED two ranks on GPU 0 ({case}): {refused[0]}")
        pytest.xfail(refused[0])
    pytest.fail(f"{case}: exit codes {codes}:\n" + "\n".join(outputs))
