"""A throwaway Redis for tests of the shared example database: Debian's `redis-server` on a
free loopback port, no persistence, its files in a temporary directory; stopped (killed and
waited for) on exit, also when the test fails.

    with redis_server.started(tmp_path) as server:   # server.url: redis://127.0.0.1:PORT/0
        ...
        server.kill()                                # a server dying mid-run

`started` is `running` for a test: without `redis-server` on PATH it fails under CI (CI
installs it) and skips elsewhere, saying why. `require_client` does the same for the redis
client, the `scale` extra (`pip install -e ".[scale]"`; requirements.lock, which CI installs,
has it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_SERVER = "redis-server"
START_TIMEOUT = 10.0


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def closed_port_url() -> str:
    """A Redis URL on a loopback port where nothing listens."""
    return f"redis://127.0.0.1:{free_port()}/0"


def _ping(port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis answers PING on the port (raw protocol: no client needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, process: subprocess.Popen, port: int, log: Path):
        self.process, self.port, self.log = process, port, log
        self.url = f"redis://127.0.0.1:{port}/0"

    def kill(self) -> None:
        """Stop the server at once (SIGKILL) and reap it; idempotent."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def alive(self) -> bool:
        return self.process.poll() is None and _ping(self.port)


def _start(directory: Path, port: int) -> RedisServer:
    log = directory / f"redis-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                *(REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(directory)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = RedisServer(process, port, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break  # exited: the port was taken in the meantime, or a bad install
        if _ping(port):
            return server
        time.sleep(0.02)
    server.kill()
    raise RuntimeError(f"redis-server on port {port} did not answer PING:\n{log.read_text()}")


def missing_reason() -> str | None:
    if shutil.which(REDIS_SERVER) is None:
        return f"{REDIS_SERVER} is not installed (Debian: apt-get install redis-server)"
    return None


@contextlib.contextmanager
def running(directory: Path) -> Iterator[RedisServer]:
    """A redis-server on a free loopback port for the duration of the block."""
    directory.mkdir(parents=True, exist_ok=True)
    error: Exception | None = None
    for _ in range(3):  # a free port can be taken between the pick and the start
        try:
            server = _start(directory, free_port())
            break
        except RuntimeError as exc:
            error = exc
    else:
        raise error  # type: ignore[misc]
    try:
        yield server
    finally:
        server.kill()


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require() -> None:
    """Fail under CI, skip elsewhere, when redis-server is not installed."""
    reason = missing_reason()
    if reason is None:
        return
    if _under_ci():
        pytest.fail(f"{reason}; CI installs it (.ci/run)")
    pytest.skip(reason)


CLIENT_MISSING = 'the redis client is not installed (the scale extra: pip install -e ".[scale]")'


def require_client() -> None:
    """Skip (pytest.importorskip) when the redis client is not installed; fail under CI, which
    installs it from requirements.lock."""
    if _under_ci() and importlib.util.find_spec("redis") is None:
        pytest.fail(f"{CLIENT_MISSING}; CI installs it (requirements.lock)")
    pytest.importorskip("redis", reason=CLIENT_MISSING)


@contextlib.contextmanager
def started(directory: Path) -> Iterator[RedisServer]:
    """`running`, for a test: without redis-server, fail under CI and skip elsewhere."""
    require()
    with running(directory) as server:
        yield server
