#!/usr/bin/env python3
"""Writes the seed corpus of local_frame_fuzzer (tests/fuzz/corpus/local_frames/): valid frames of
every client message type, multi-rank SUBMIT sequences the readiness table matches, and mutations
of them (truncated, wrong lengths, bad fields). Layout of an input: local_frame_fuzzer.cc.
Run from the repository root after changing the wire format; the output is committed."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "local_frames")
MAGIC, VERSION = 0x31445241, 1
HELLO, ADD_SEGMENT, SUBMIT, RELEASE, BYE = 1, 3, 4, 6, 8
HEADER = struct.Struct("<IHHIIQ")
HELLO_FMT = struct.Struct("<64siiiiIIQ")
SUBMIT_FMT = struct.Struct("<IIIidd256sII8qQQiiII")
DSIZE = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 8, 7: 2, 8: 2, 9: 4, 10: 8, 11: 1}


def frame(msg_type, payload=b"", request_id=0, magic=MAGIC, version=VERSION, length=None,
          reserved=0):
    n = len(payload) if length is None else length
    return HEADER.pack(magic, version, msg_type, n, reserved, request_id) + payload


def hello(job=b"job", rank=-1, size=2, local_rank=-1, local_size=-1, segment=1 << 20):
    return frame(HELLO, HELLO_FMT.pack(job, rank, size, local_rank, local_size, 1, 0, segment))


def submit(name=b"t", collective=1, dtype=9, op=1, root=0, shape=(4,), offset=0, group=(-1, 0),
           splits=(), request_id=1, nbytes=None, prescale=1.0, postscale=1.0, segment=0,
           ndims=None):
    n = 1
    for d in shape:
        n *= d
    if nbytes is None:
        nbytes = 0 if collective in (6, 7) else n * DSIZE.get(dtype, 1)
    dims = list(shape) + [0] * (8 - len(shape))
    payload = SUBMIT_FMT.pack(collective, dtype, op, root, prescale, postscale, name,
                              len(shape) if ndims is None else ndims, segment, *dims, offset, nbytes, group[0], group[1], len(splits), 0)
    payload += b"".join(struct.pack("<q", s) for s in splits)
    return frame(SUBMIT, payload, request_id=request_id)


def record(rank, data, fd=False):
    return bytes([rank | (0x80 if fd else 0)]) + struct.pack("<H", len(data)) + data


def write(name, job_size, records):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([job_size - 1]) + b"".join(records))


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    # One valid frame of each client message type.
    write("hello", 1, [record(0, hello(), fd=True)])
    write("hello_ranked", 2, [record(0, hello(rank=1, size=2, local_rank=1, local_size=2), True)])
    write("add_segment", 1, [record(0, frame(ADD_SEGMENT, struct.pack("<IIQ", 1, 0, 4096)), True)])
    write("release", 1, [record(0, frame(RELEASE, request_id=9))])
    write("bye", 1, [record(0, frame(BYE))])
    collectives = {"allreduce": 1, "allgather": 2, "broadcast": 3, "alltoall": 4,
                   "reducescatter": 5, "barrier": 6, "join": 7}
    for cname, c in collectives.items():
        shape = () if c in (6, 7) else (4, 2)
        write(f"submit_{cname}", 1, [record(0, submit(name=cname.encode(), collective=c,
                                                      shape=shape))])
    for dtype in DSIZE:
        write(f"submit_dtype_{dtype}", 1, [record(0, submit(dtype=dtype, shape=(3, 5)))])
    for op in range(1, 6):
        write(f"submit_op_{op}", 1, [record(0, submit(op=op, prescale=0.5, postscale=2.0))])
    # Sequences the readiness table matches across ranks.
    write("two_ranks_allreduce", 2, [record(0, submit(request_id=1)), record(1, submit(request_id=2))])
    write("two_ranks_mismatched_shape", 2, [record(0, submit(shape=(2, 3))),
                                            record(1, submit(shape=(3, 3)))])
    write("two_ranks_mismatched_dtype", 2, [record(0, submit(dtype=9)), record(1, submit(dtype=10))])
    write("two_ranks_alltoall_splits", 2, [
        record(0, submit(collective=4, shape=(4, 2), splits=(1, 3))),
        record(1, submit(collective=4, shape=(6, 2), splits=(6, 0)))])
    write("two_ranks_allgather_rows", 2, [record(0, submit(collective=2, shape=(1, 4))),
                                          record(1, submit(collective=2, shape=(5, 4)))])
    write("two_ranks_broadcast_roots", 2, [record(0, submit(collective=3, root=0)),
                                           record(1, submit(collective=3, root=1))])
    write("three_ranks_group", 3, [record(r, submit(name=b"g%d" % i, group=(7, 2)))
                                   for i in range(2) for r in range(3)])
    write("four_ranks_join", 4, [record(0, submit(name=b"join", collective=7, shape=())),
                                 record(1, submit(name=b"x")),
                                 record(2, submit(name=b"join", collective=7, shape=())),
                                 record(3, submit(name=b"x")),
                                 record(1, submit(name=b"join", collective=7, shape=())),
                                 record(3, submit(name=b"join", collective=7, shape=()))])
    write("duplicate_name", 2, [record(0, submit(name=b"d")), record(0, submit(name=b"d"))])
    write("session", 2, [record(0, hello(), True), record(1, hello(), True),
                         record(0, submit()), record(1, submit()), record(0, frame(RELEASE, request_id=1)),
                         record(0, frame(BYE)), record(1, frame(BYE))])
    # Mutations: each is rejected by one check of the decoder.
    good = submit(shape=(4, 4))
    write("truncated_header", 1, [record(0, good[:10])])
    write("truncated_submit", 1, [record(0, frame(SUBMIT, good[HEADER.size:HEADER.size + 100]))])
    write("wrong_magic", 1, [record(0, frame(BYE, magic=0xdeadbeef))])
    write("wrong_version", 1, [record(0, frame(BYE, version=9))])
    write("reserved_set", 1, [record(0, frame(BYE, reserved=1))])
    write("length_lies", 1, [record(0, frame(BYE, length=50))])
    write("unknown_type", 1, [record(0, frame(99))])
    write("daemon_type", 1, [record(0, frame(2, b"\0" * 48))])
    write("hello_no_fd", 1, [record(0, hello())])
    write("bye_with_fd", 1, [record(0, frame(BYE), True)])
    write("hello_bad_job", 1, [record(0, hello(job=b"has space"), True)])
    write("hello_unterminated_job", 1, [record(0, hello(job=b"j" * 64), True)])
    write("hello_rank_above_size", 1, [record(0, hello(rank=5, size=2), True)])
    write("hello_zero_segment", 1, [record(0, hello(segment=0), True)])
    write("submit_unknown_collective", 1, [record(0, submit(collective=99))])
    write("submit_unknown_dtype", 1, [record(0, submit(dtype=77))])
    write("submit_unknown_op", 1, [record(0, submit(op=9))])
    write("submit_nan_scale", 1, [record(0, submit(prescale=float("nan")))])
    write("submit_negative_dim", 1, [record(0, submit(shape=(-4,), nbytes=16))])
    write("submit_overflow_shape", 1, [record(0, submit(shape=(1 << 62, 1 << 62, 4), nbytes=16))])
    write("submit_huge", 1, [record(0, submit(shape=(1 << 38,), nbytes=1 << 40))])
    write("submit_bytes_lie", 1, [record(0, submit(nbytes=17))])
    write("submit_unaligned", 1, [record(0, submit(offset=3))])
    write("submit_offset_wraps", 1, [record(0, submit(offset=(1 << 64) - 64))])
    write("submit_too_many_dims", 1, [record(0, submit(shape=(1,) * 8, ndims=9))])
    write("submit_empty_name", 1, [record(0, submit(name=b""))])
    write("submit_unterminated_name", 1, [record(0, submit(name=b"n" * 256))])
    write("submit_splits_not_alltoall", 1, [record(0, submit(splits=(2, 2)))])
    write("submit_splits_wrong_sum", 1, [record(0, submit(collective=4, shape=(4,), splits=(1, 1)))])
    write("submit_negative_split", 1, [record(0, submit(collective=4, shape=(4,), splits=(5, -1)))])
    write("submit_barrier_with_tensor", 1, [record(0, submit(collective=6, shape=(4,)))])
    write("submit_bad_group", 1, [record(0, submit(group=(3, 0)))])
    write("submit_gather_scalar", 1, [record(0, submit(collective=2, shape=()))])
    split_count = submit(collective=4, shape=(4,), splits=(2, 2))
    write("submit_splits_count_lies", 1, [record(0, split_count[:-8])])
    write("oversize", 1, [record(0, frame(SUBMIT, b"x" * 60000))])


if __name__ == "__main__":
    main()
