"""Real Redis servers for tests: a Docker container when a Docker engine answers, otherwise
the ``redis-server`` binary (installed with apt-get if it is missing and we may).

Every server runs with durable settings by default (``appendonly yes``, ``appendfsync
always``, no RDB snapshots), so a test may kill or restart it and expect every acknowledged
write back. ``restart()`` keeps the port and the data directory, so URLs stay valid.

Usage outside pytest fixtures::

    with start_redis_server(tmp_path) as server:
        ...  # server.url, server.restart(kill=True), server.pause(), server.resume()

Environment:

* ``GROUPCOORD_TEST_REDIS=binary|docker`` forces one kind (default: docker if it answers).
* ``GROUPCOORD_TEST_REDIS_IMAGE`` picks the container image (default ``redis:7.0``).
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

__all__ = [
    "ContainerRedisServer",
    "LocalRedisServer",
    "RedisServer",
    "RedisServerUnavailable",
    "docker_available",
    "find_redis_server_binary",
    "start_redis_server",
]

DEFAULT_IMAGE = "redis:7.0"
READY_TIMEOUT_S = 20.0


class RedisServerUnavailable(RuntimeError):
    """No way to run a real Redis server here (no Docker, no binary, cannot install)."""


def durable_args(appendonly: bool) -> list[str]:
    if appendonly:
        return ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    # Deliberately unsafe: for tests of the store's warning about exactly this.
    return ["--appendonly", "no", "--appendfsync", "everysec", "--save", ""]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer(abc.ABC):
    """A running Redis server that a test may stop, kill, restart, pause and resume."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self, db: int = 0, **kwargs: Any) -> redis.Redis:
        """A synchronous client (for setup and assertions; the code under test brings its own)."""
        return redis.Redis(host=self.host, port=self.port, db=db, **kwargs)

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None:
        """Graceful shutdown (SIGTERM); idempotent."""

    @abc.abstractmethod
    def kill(self) -> None:
        """kill -9: the server gets no chance to flush anything it has not yet fsynced."""

    @abc.abstractmethod
    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing answers."""

    @abc.abstractmethod
    def resume(self) -> None: ...

    def restart(self, *, kill: bool = False) -> None:
        """Stop (or kill -9) and start again on the same port with the same data."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.start()

    def wait_until_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with self.client(socket_timeout=1.0, socket_connect_timeout=1.0) as c:
                    # PING also fails with LOADING while the AOF is being replayed.
                    if c.ping() and self._is_ours(c):
                        return
            except redis.RedisError as e:
                last = e
            # Polling is the only way to learn that a fresh process accepts connections.
            time.sleep(0.02)
        raise RedisServerUnavailable(f"Redis at {self.url} did not answer PING: {last}")

    def _check_alive(self) -> None:  # noqa: B027 - optional hook
        """Raise if the server process is known to be gone."""

    def _is_ours(self, client: redis.Redis) -> bool:
        """True if the server answering on our port is the one we started."""
        return True

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class LocalRedisServer(RedisServer):
    """The ``redis-server`` binary on a free localhost port, data in ``data_dir``."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        appendonly: bool = True,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
        port: int | None = None,
        bind: Sequence[str] = (),
        prefix: Sequence[str] = (),
        host: str = "127.0.0.1",
    ) -> None:
        """``bind``: addresses to listen on besides 127.0.0.1 (a veth of a network namespace
        a test made, so that a shard inside reaches the store). ``prefix``: a command that
        execs the server in place (``ip netns exec NAME``: a server inside a namespace, then
        reached at ``host``, its veth address)."""
        self.binary = binary or find_redis_server_binary()
        self.bind = list(bind)
        self.prefix = list(prefix)
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or 0
        self.appendonly = appendonly
        self.extra_args = list(extra_args)
        self.log_path = self.data_dir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("already running")
        # A port picked by free_port() can be taken before redis binds it; pick another
        # unless this is a restart, which must keep its port.
        restart = bool(self.port)
        attempts = 1 if restart else 5
        for _ in range(attempts):
            if not restart:
                self.port = free_port()
            self._spawn()
            try:
                self.wait_until_ready()
                return
            except RedisServerUnavailable:
                log_tail = self._log_tail()
                self.kill()
                if "Address already in use" in log_tail and attempts > 1:
                    continue
                raise RedisServerUnavailable(
                    f"redis-server on port {self.port} did not start:\n{log_tail}"
                ) from None
        raise RedisServerUnavailable("redis-server: no free port found")

    def _spawn(self) -> None:
        args = [
            *self.prefix,
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            *self.bind,
            # a client from another address than loopback, without a password
            *(["--protected-mode", "no"] if self.bind else []),
            "--dir",
            str(self.data_dir),
            "--logfile",
            str(self.log_path),
            "--daemonize",
            "no",
            *durable_args(self.appendonly),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _running.add(self.process)

    def _is_ours(self, client: redis.Redis) -> bool:
        # Another test run on this machine may have bound "our" free port first: then our
        # server fails to bind and exits, while theirs answers our PING. Sharing a server
        # with a stranger (who flushes and kills it) must never pass for a healthy start.
        assert self.process is not None
        return int(client.info("server")["process_id"]) == self.process.pid

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RedisServerUnavailable(
                f"redis-server exited with {self.process.returncode}:\n{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)  # a paused server cannot exit
                self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process = None

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


# Servers still running when the interpreter exits (a test forgot to stop one, or the run
# was interrupted) are killed rather than left behind.
_running: weakref.WeakSet[subprocess.Popen[bytes]] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_running):
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGCONT)
                process.kill()


class ContainerRedisServer(RedisServer):
    """A testcontainers Redis container with a fixed host port (so restarts keep the URL).
    Data lives in the container's /data, which survives stop/start of the same container."""

    def __init__(self, *, appendonly: bool = True, image: str | None = None) -> None:
        from testcontainers.community.redis import RedisContainer

        self.image = image or os.environ.get("GROUPCOORD_TEST_REDIS_IMAGE", DEFAULT_IMAGE)
        self.port = free_port()
        self.container = RedisContainer(self.image).with_bind_ports(6379, self.port)
        # A list, not a string: the empty argument of --save must survive as-is.
        self.container.with_command(["redis-server", *durable_args(appendonly)])
        self.host = "127.0.0.1"
        self._started_once = False

    def start(self) -> None:
        if not self._started_once:
            self.container.start()
            self._started_once = True
        else:
            self.container.get_wrapped_container().start()
        self.host = self.container.get_container_host_ip()
        self.port = int(self.container.get_exposed_port(6379))
        self.wait_until_ready()

    def stop(self) -> None:
        if self._started_once:
            self.container.get_wrapped_container().stop(timeout=15)

    def kill(self) -> None:
        with contextlib.suppress(Exception):  # already stopped
            self.container.get_wrapped_container().kill()

    def pause(self) -> None:
        self.container.get_wrapped_container().pause()

    def resume(self) -> None:
        self.container.get_wrapped_container().unpause()

    def remove(self) -> None:
        if self._started_once:
            self.container.stop()  # testcontainers' stop removes the container
            self._started_once = False

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def docker_available(timeout_s: float = 2.0) -> bool:
    """True if a Docker engine answers a ping quickly; False on any error."""
    try:
        import docker

        client = docker.from_env(timeout=int(max(1, timeout_s)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@functools.cache
def find_redis_server_binary() -> str:
    """The path of ``redis-server``; installs it with apt-get if missing and possible."""
    found = _which_redis_server()
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise RedisServerUnavailable(
            "redis-server is not installed and there is no apt-get to install it; install "
            "Redis >= 7 (or start a Docker engine) to run the integration tests"
        )
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo"):
        prefix = ["sudo", "-n"]  # never prompt for a password in a test run
    else:
        raise RedisServerUnavailable(
            "redis-server is not installed, we are not root and there is no sudo; run "
            "'apt-get install -y redis-server' (or start a Docker engine)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
        result = subprocess.run(
            prefix + command, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        if result.returncode != 0:
            raise RedisServerUnavailable(
                f"redis-server is not installed and '{' '.join(prefix + command)}' failed "
                f"({result.returncode}):\n{result.stderr[-2000:]}"
            )
    found = _which_redis_server()
    if not found:
        raise RedisServerUnavailable("apt-get installed redis-server but it is not on PATH")
    return found


def _which_redis_server() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    for candidate in ("/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def start_redis_server(
    data_dir: str | os.PathLike[str], *, appendonly: bool = True, kind: str | None = None
) -> RedisServer:
    """Start a real Redis server and return it (use it as a context manager to stop it).

    ``kind`` is "docker" or "binary"; by default ``GROUPCOORD_TEST_REDIS`` or, if unset,
    docker when an engine answers and the binary otherwise.
    """
    kind = kind or os.environ.get("GROUPCOORD_TEST_REDIS") or None
    if kind not in (None, "docker", "binary"):
        raise ValueError(f"GROUPCOORD_TEST_REDIS must be 'docker' or 'binary', not {kind!r}")
    if kind == "docker" or (kind is None and docker_available()):
        try:
            container = ContainerRedisServer(appendonly=appendonly)
            container.start()
            return container
        except Exception as e:
            if kind == "docker":
                raise RedisServerUnavailable(f"could not start a Redis container: {e}") from e
            # The engine answered but could not run the container (no image, no network,
            # ...): the local binary is just as real.
    server = LocalRedisServer(data_dir, appendonly=appendonly)
    server.start()
    return server


@contextlib.contextmanager
def redis_server(
    data_dir: str | os.PathLike[str], *, appendonly: bool = True, kind: str | None = None
) -> Iterator[RedisServer]:
    """``start_redis_server`` as a context manager that always stops the server."""
    server = start_redis_server(data_dir, appendonly=appendonly, kind=kind)
    with server:
        yield server
