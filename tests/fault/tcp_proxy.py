"""A TCP proxy between two daemons that can cut the link the way a failed switch does: once cut,
no byte moves in either direction and nothing is closed (peers see silence, not a reset); new
connections are accepted and held silent too. Restoring closes the silent connections (as the
peers' kernels eventually would) and forwards again."""
import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, upstream_host, upstream_port):
        self.upstream = (upstream_host, upstream_port)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.peer = {}     # socket -> the other end of its pair
        self.held = []     # sockets accepted while cut
        self.cut_flag = False
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def cut(self):
        with self.lock:
            self.cut_flag = True
            for s in self.peer:
                self.sel.unregister(s)

    def restore(self):
        with self.lock:
            for s in list(self.peer) + self.held:
                s.close()
            self.peer.clear()
            self.held.clear()
            self.cut_flag = False

    def close(self):
        self.stopping = True
        self.thread.join(5)
        self.restore()
        self.listener.close()

    def _run(self):
        while not self.stopping:
            for key, _ in self.sel.select(timeout=0.05):
                with self.lock:
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj in self.peer:
                        self._pump(key.fileobj)

    def _accept(self):
        try:
            client, _ = self.listener.accept()
        except BlockingIOError:
            return
        if self.cut_flag:
            self.held.append(client)
            return
        try:
            server = socket.create_connection(self.upstream, timeout=2)
        except OSError:
            client.close()
            return
        for s in (client, server):
            s.setblocking(True)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer[client], self.peer[server] = server, client
        self.sel.register(client, selectors.EVENT_READ)
        self.sel.register(server, selectors.EVENT_READ)

    def _pump(self, s):
        other = self.peer[s]
        try:
            data = s.recv(65536)
            if data:
                other.sendall(data)
                return
        except OSError:
            pass
        for x in (s, other):  # one end closed: close the pair, like a real connection
            self.sel.unregister(x)
            del self.peer[x]
            x.close()
