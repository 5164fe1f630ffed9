"""A real `prefect server` on a free loopback port, as an operator starts one for the
deployments (prefect.yaml): for the test of `speccat serve` and for benchmarks whose nights
run as a deployment's do, against a server that is already up."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

PREFECT = Path(sys.executable).with_name("prefect")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("prefect server exited")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"prefect server at {url} not healthy after {seconds} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@contextlib.contextmanager
def prefect_server(env: dict[str, str], log: Path) -> Iterator[str]:
    """Start `prefect server` with `env` (its PREFECT_HOME holds the server's database), its
    output into `log`; yield its API URL once it answers, and stop it after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    with log.open("w") as out:
        server = subprocess.Popen(
            [str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_healthy(url, server)
        yield url
    finally:
        stop(server)
