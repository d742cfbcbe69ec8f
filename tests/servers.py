"""Real servers for tests: the production environment of docs/deploy.md and gunicorn
started with the production command on a loopback port."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
GUNICORN = str(Path(sys.executable).parent / "gunicorn")


def production_env() -> dict[str, str]:
    """The environment block of docs/deploy.md, with `<secret>` placeholders filled in."""
    text = DEPLOY_DOC.read_text()
    block = text.split("<!-- production-env:start -->", 1)[1].split("<!-- production-env:end")[0]
    env = {}
    for line in block.splitlines():
        match = re.match(r"([A-Z_]+)=(\S*)", line)
        if match:
            name, value = match.groups()
            env[name] = secrets.token_urlsafe(50) if value == "'<secret>'" else value
    assert "DJANGO_SECRET_KEY" in env, block
    return env


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of memoryadmin's settings, plus `extra`."""
    names = set(production_env()) | {
        "DJANGO_DEBUG",
        "DJANGO_SETTINGS_MODULE",
        "MEMORYADMIN_DEV_SECRETS",
        "MEMORYADMIN_VAR_DIR",
        "DJANGO_STATIC_ROOT",
        "REDIS_URL",
        "MEMORYADMIN_METRICS_TOKEN",
    }
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith("GUNICORN")}
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(url: str, process: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer within {seconds} s")


@contextmanager
def gunicorn(env: dict[str, str], *, workers: int = 1, threads: int = 2) -> Iterator[str]:
    """gunicorn with gunicorn.conf.py and `env` on a free loopback port; yields its base
    URL, stops it gracefully on exit. Its log goes to this process's standard error."""
    port = free_port()
    env = {
        **env,
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(workers),
        "GUNICORN_THREADS": str(threads),
    }
    process = subprocess.Popen(
        [GUNICORN, "--config", "gunicorn.conf.py"], cwd=ROOT, env=env, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base + "/healthz", process)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
