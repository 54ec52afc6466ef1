"""The local wire protocol (proto/local_wire.h) spoken by hand from Python, for tests that play
hostile or broken clients: frame builders and a raw SOCK_SEQPACKET client."""
import fcntl
import os
import socket
import struct

MAGIC, VERSION = 0x31445241, 1
HELLO, WELCOME, ADD_SEGMENT, SUBMIT, COMPLETE, RELEASE, NOTIFY, BYE, ERROR, RESULT_SEGMENT = range(1, 11)
HEADER = struct.Struct("<IHHIIQ")
HELLO_FMT = struct.Struct("<64siiiiIIQ")
ERROR_FMT = struct.Struct("<iI")
COMPLETE_FMT = struct.Struct("<iIIIQQ8qiI")
SUBMIT_FMT = struct.Struct("<IIIidd256sII8qQQiiII")
F_SEAL_SHRINK = 0x0002


def frame(msg_type, payload=b"", request_id=0, magic=MAGIC, version=VERSION, length=None):
    n = len(payload) if length is None else length
    return HEADER.pack(magic, version, msg_type, n, 0, request_id) + payload


def sealed_memfd(size):
    fd = os.memfd_create("hostile", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, F_SEAL_SHRINK)
    return fd


def hello(job=b"hostile", rank=-1, size=1, segment=1 << 20):
    return frame(HELLO, HELLO_FMT.pack(job, rank, size, -1, -1, os.getpid(), 0, segment))


def submit(name=b"t", request_id=7, offset=0, nbytes=16, shape=(4,), dtype=9, collective=1,
           segment=0):
    dims = list(shape) + [0] * (8 - len(shape))
    return frame(SUBMIT, SUBMIT_FMT.pack(collective, dtype, 1, 0, 1.0, 1.0, name, len(shape),
                                         segment, *dims, offset, nbytes, -1, 0, 0, 0),
                 request_id=request_id)


class RawClient:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(10)
        self.sock.connect(path)

    def send(self, data, fds=()):
        socket.send_fds(self.sock, [data], list(fds))

    def recv(self):
        data, fds, _, _ = socket.recv_fds(self.sock, 1 << 17, 4)
        for fd in fds:
            os.close(fd)
        if not data:
            return None
        magic, version, msg_type, n, _, request_id = HEADER.unpack_from(data)
        assert (magic, version) == (MAGIC, VERSION)
        return msg_type, request_id, data[HEADER.size:]

    def expect_error(self, needle, code=3):
        msg_type, _, payload = self.recv()
        assert msg_type == ERROR, msg_type
        got_code, n = ERROR_FMT.unpack_from(payload)
        text = payload[ERROR_FMT.size:ERROR_FMT.size + n].decode()
        assert needle in text, text
        assert got_code == code, (got_code, text)
        return text

    def expect_complete_error(self, request_id, needle, code=3):
        msg_type, rid, payload = self.recv()
        assert (msg_type, rid) == (COMPLETE, request_id), (msg_type, rid)
        fields = COMPLETE_FMT.unpack_from(payload)
        text = payload[COMPLETE_FMT.size:].decode()
        assert fields[0] == code, (fields[0], text)
        assert needle in text, text

    def welcome(self, job=b"hostile"):
        fd = sealed_memfd(1 << 20)
        self.send(hello(job), [fd])
        os.close(fd)
        msg_type, _, _ = self.recv()
        assert msg_type == WELCOME
        return self

    def close(self):
        self.sock.close()


def add_segment(index, nbytes):
    return frame(ADD_SEGMENT, struct.pack("<IIQ", index, 0, nbytes))


def error_text(payload):
    """(code, text) of an ERROR or NOTIFY payload."""
    code, n = ERROR_FMT.unpack_from(payload)
    return code, payload[ERROR_FMT.size:ERROR_FMT.size + n].decode()


def complete_fields(payload):
    """(code, bytes, text) of a COMPLETE payload."""
    fields = COMPLETE_FMT.unpack_from(payload)
    return fields[0], fields[5], payload[COMPLETE_FMT.size + 8 * fields[-1]:].decode()
