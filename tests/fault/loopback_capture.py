"""TCP payload to and from one port on the loopback interface, recorded while a test runs, to
see what a reader of the network would (AF_PACKET: needs CAP_NET_RAW, so root here; tests skip
or do without it when can_capture() is False)."""
import socket
import struct
import threading


def can_capture():
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800)).close()
        return True
    except (PermissionError, OSError):
        return False


class LoopbackCapture:
    """streams: (src port, dst port) -> the payload bytes that went that way, in order; order:
    those keys as first seen. Records until close()."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.streams = {}
        self.order = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                frame = self.sock.recv(1 << 17)
            except socket.timeout:
                continue
            ip = frame[14:]
            if len(ip) < 20 or ip[9] != 6:  # TCP over IPv4 only
                continue
            tcp = ip[(ip[0] & 0xF) * 4:]
            src, dst = struct.unpack("!HH", tcp[:4])
            data = tcp[(tcp[12] >> 4) * 4:]
            if not data or self.port not in (src, dst):
                continue
            if (src, dst) not in self.streams:
                self.order.append((src, dst))
            self.streams[(src, dst)] = self.streams.get((src, dst), b"") + data

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sock.close()

    def first_dialed(self):
        """What the first connection to the port sent it (b"" when none was seen)."""
        key = next((k for k in self.order if k[1] == self.port), None)
        return self.streams[key] if key else b""

    def captured(self):
        return sum(len(b) for b in self.streams.values())

    def found(self, pattern):
        return any(pattern in b for b in self.streams.values())
