"""HTTP over a unix socket for requests: `http+unix://<percent-encoded socket path>/models`.

A fleet replica's management API listens on a unix socket in a 0700 directory
(config/config.replica.properties), so only its supervisor's user can reach it: TorchServe has no
token there (auth lives at the front door), and a loopback port would be open to every local user.
TorchServeClient mounts this adapter on its session, so every client (serving.swap, serving.fleet
status and roll, serving.graceful) takes either kind of URL.
"""

from __future__ import annotations

import socket
import threading
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection

SCHEME = "http+unix"


def unix_url(socket_path: str) -> str:
    """The base URL for a socket path: paths go in the host part, '/' escaped."""
    return f"{SCHEME}://{quote(socket_path, safe='')}"


class _UnixConnection(HTTPConnection):
    def __init__(self, *args: Any, socket_path: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.socket_path = socket_path

    def _new_conn(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        timeout = self.timeout if isinstance(self.timeout, int | float) else None
        sock.settimeout(timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as error:
            sock.close()
            raise urllib3.exceptions.NewConnectionError(self, f"{self.socket_path}: {error}") from error
        return sock


class _UnixPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _UnixConnection


class UnixSocketAdapter(HTTPAdapter):
    """One keep-alive pool per socket path; proxies never apply to a local socket."""

    def __init__(self) -> None:
        super().__init__()
        self._pools: dict[str, _UnixPool] = {}
        self._lock = threading.Lock()

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: Any, proxies: Any = None, cert: Any = None
    ) -> urllib3.HTTPConnectionPool:
        path = unquote(urlsplit(request.url or "").netloc)
        with self._lock:
            if path not in self._pools:
                self._pools[path] = _UnixPool("localhost", socket_path=path)
            return self._pools[path]

    def request_url(self, request: requests.PreparedRequest, proxies: Any) -> str:
        return request.path_url

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()
        super().close()


def mount(session: requests.Session) -> requests.Session:
    session.mount(f"{SCHEME}://", UnixSocketAdapter())
    return session
