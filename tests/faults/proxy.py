"""A TCP proxy in front of a database server, which a test can cut and restore.

Cut, it closes every connection it carries (the clients see the server close them)
and stops listening (new connections are refused): to spawnflow the database is gone,
as in a restart, a failover or a network blip. Restored, it listens on the same port.

It can also lose the answers to COMMITs: the server gets the COMMIT and commits, then
the connection drops before the client hears so — the one outage in which the client
cannot know whether its write happened.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; :meth:`cut` and :meth:`restore` it."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server: socket.socket | None = None
        self.connections = 0
        self._to_lose: dict[bytes, int] = {}
        #: How many COMMITs the server got whose answer was lost.
        self.answers_lost = 0

    def __enter__(self) -> TcpProxy:
        self.restore()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cut()

    def restore(self) -> None:
        """Listen again (on the same port); nothing to do if it listens."""
        if self._server is not None:
            return
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`restore`."""
        server, self._server = self._server, None
        if server is not None:
            _close(server)
        with self._lock:
            carried, self._open = self._open, set()
        for sock in carried:
            _close(sock)

    def lose_commit_answers(self, after: bytes, count: int) -> None:
        """The next ``count`` COMMITs of transactions that sent ``after`` (a piece of SQL,
        such as ``b"worker_pid="``) reach the server, but their answer does not reach the
        client: the connection drops first."""
        with self._lock:
            self._to_lose[after] = count

    def _watch_client(self, data: bytes, seen: set[bytes]) -> bool:
        """Note what the transaction sent; whether ``data`` is a COMMIT to lose the answer of."""
        with self._lock:
            seen.update(pattern for pattern in self._to_lose if pattern in data)
            # PostgreSQL's simple query ('Q', length) and MySQL's COM_QUERY (length,
            # sequence, 0x03) both put the statement's text at byte 5.
            if data[5:11] != b"COMMIT" or not (data[:1] == b"Q" or data[4:5] == b"\x03"):
                return False
            hits = [pattern for pattern in seen if self._to_lose.get(pattern)]
            seen.clear()
            if not hits:
                return False
            self._to_lose[hits[0]] -= 1
            self.answers_lost += 1
            return True

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._server is not server:  # cut meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._open |= {client, upstream}
                self.connections += 1
            doomed = threading.Event()  # the next answer from upstream is lost
            for source, sink, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(source, sink, doomed, answers), daemon=True
                ).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, doomed: threading.Event, answers: bool
    ) -> None:
        seen: set[bytes] = set()  # of the patterns to lose a COMMIT after, those sent
        try:
            while data := source.recv(65536):
                if answers and doomed.is_set():
                    break  # the server answered a COMMIT: drop the answer and the link
                if not answers and self._watch_client(data, seen):
                    doomed.set()  # before the COMMIT leaves: its answer cannot slip by
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            _close(sock)
            with self._lock:
                self._open.discard(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept() or recv()
    except OSError:
        pass
    sock.close()
