"""A proxy in front of one daemon's data port that the test controls, to break a job's data
connection from the outside the way a failing peer or network would. It forwards every
connection both ways unchanged until told to:
  cut_after(n)  close both ends of a connection (FIN, as a peer process that exits does) once n
                bytes have gone from the dialer to the daemon, mid-way through a chunk;
  inject(data)  send `data` to the daemon on every open connection, between two forwarded
                chunks, as if the dialer had sent it.
The daemon behind it listens on 127.0.0.2 and advertises 127.0.0.1 (its cluster address's host)
with the same port, on which the tap listens: peers dial the tap without knowing."""
import socket
import threading
import time

CHUNK = 64 * 1024


class StreamTap:
    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.pairs = []         # [dialer socket, daemon socket, bytes forwarded to the daemon]
        self.cut_at = None      # bytes a connection forwards to the daemon before it is cut
        self.cuts = 0           # connections cut so far
        self.cut_time = None    # time.monotonic() of the last cut
        self.connections = 0    # connections accepted so far
        self.threads = []
        self.stopping = False
        self._start(self._accept)

    def daemon_flags(self):
        """The flags that put a daemon behind this tap."""
        return [f"--data_address=127.0.0.2:{self.port}"]

    def cut_after(self, n):
        with self.lock:
            self.cut_at = n

    def inject(self, data):
        """Sends `data` to the daemon on every open connection; returns how many."""
        with self.lock:
            for pair in self.pairs:
                pair[1].sendall(data)
            return len(self.pairs)

    def forward(self):
        """Back to forwarding unchanged (connections already cut stay closed)."""
        with self.lock:
            self.cut_at = None

    def close(self):
        self.stopping = True
        self.listener.shutdown(socket.SHUT_RDWR)
        with self.lock:
            for pair in self.pairs:
                self._close_pair(pair)
        for t in self.threads:
            t.join(5)
        self.listener.close()

    def _start(self, target, *args):
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self):
        while not self.stopping:
            try:
                dialer, _ = self.listener.accept()
            except OSError:
                return
            try:
                daemon = socket.create_connection(("127.0.0.2", self.port), timeout=5)
            except OSError:
                dialer.close()
                continue
            daemon.settimeout(None)
            for s in (dialer, daemon):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = [dialer, daemon, 0]
            with self.lock:
                self.pairs.append(pair)
                self.connections += 1
            self._start(self._to_daemon, pair)
            self._start(self._to_dialer, pair)

    def _to_daemon(self, pair):
        dialer, daemon, _ = pair
        while True:
            try:
                data = dialer.recv(CHUNK)
            except OSError:
                data = b""
            with self.lock:
                if pair not in self.pairs:
                    return
                if not data:
                    return self._close_pair(pair)
                if self.cut_at is not None and pair[2] + len(data) >= self.cut_at:
                    daemon.sendall(data[:max(0, self.cut_at - pair[2] - 1)])
                    self.cuts += 1
                    self.cut_time = time.monotonic()
                    return self._close_pair(pair)
                try:
                    daemon.sendall(data)
                except OSError:
                    return self._close_pair(pair)
                pair[2] += len(data)

    def _to_dialer(self, pair):
        dialer, daemon, _ = pair
        while True:
            try:
                data = daemon.recv(CHUNK)
                if data:
                    dialer.sendall(data)
                    continue
            except OSError:
                pass
            with self.lock:
                if pair in self.pairs:
                    self._close_pair(pair)
            return

    def _close_pair(self, pair):
        """Both ends closed with a FIN (lock held)."""
        self.pairs.remove(pair)
        for s in pair[:2]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
