"""The production server: required secrets, check --deploy, private files, gunicorn with
compressed hashed static files."""

from __future__ import annotations

import gc
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from memoryadmin.demo.project import demo_setup
from tests.helpers import (
    GUNICORN,
    ROOT,
    clean_env,
    free_port,
    gunicorn,
    manage,
    production_env,
    python,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("database", ["sqlite-url", "var"])
@pytest.mark.parametrize("missing", ["DJANGO_SECRET_KEY", "MEMORYADMIN_PARTITION_SECRET"])
def test_without_debug_a_missing_secret_stops_every_command(
    missing: str, database: str, tmp_path: Path
) -> None:
    env = clean_env(**production_env(), MEMORYADMIN_VAR_DIR=str(tmp_path / "var"))
    env["DATABASE_URL"] = f"sqlite:///{tmp_path}/db.sqlite3"
    if database == "var":  # the default: var/memoryadmin.sqlite3
        del env["DATABASE_URL"]
    del env[missing]
    # Django's own commands and memoryadmin's alike: one line, exit code 1, no traceback.
    for args in (["check"], ["memory", "--project", "demo", "list"]):
        result = manage(*args, env=env)
        assert result.returncode == 1, result.stderr
        assert result.stdout == ""
        assert result.stderr.startswith(f"Error: {missing} must be set when DJANGO_DEBUG is off")
        assert result.stderr.count("\n") == 1, result.stderr
    # Refused before touching the file system: no var/, no secret, no empty database file.
    assert list(tmp_path.iterdir()) == []


def test_a_malformed_setting_is_one_error_line(tmp_path: Path) -> None:
    env = clean_env(**production_env(), MEMORYADMIN_VAR_DIR=str(tmp_path / "var"))
    env["DATABASE_URL"] = f"sqlite:///{tmp_path}/db.sqlite3"
    env["MEMORYADMIN_API_RATE"] = "bogus"
    result = manage("memory", "--project", "demo", "list", env=env)
    assert result.returncode == 1, result.stderr
    assert result.stderr == "Error: MEMORYADMIN_API_RATE must look like 600/minute, not 'bogus'\n"
    assert list(tmp_path.iterdir()) == []  # nothing made
    # --traceback keeps Django's traceback for whoever asks for it.
    traced = manage("check", "--traceback", env=env)
    assert traced.returncode == 1
    assert "Traceback (most recent call last)" in traced.stderr
    assert "ImproperlyConfigured: MEMORYADMIN_API_RATE" in traced.stderr


def test_check_deploy_is_clean_with_the_documented_environment(tmp_path: Path) -> None:
    env = clean_env(**production_env(), MEMORYADMIN_VAR_DIR=str(tmp_path))
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_check_deploy_warns_without_the_https_settings(tmp_path: Path) -> None:
    """The clean check above is earned by the settings, not by a silenced check."""
    env = clean_env(**production_env(), MEMORYADMIN_VAR_DIR=str(tmp_path))
    del env["DJANGO_SECURE_HSTS_SECONDS"], env["DJANGO_SECURE_SSL_REDIRECT"]
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W004" in result.stderr
    assert "security.W008" in result.stderr


def test_development_generates_private_secrets_and_database(tmp_path: Path) -> None:
    var = tmp_path / "var"
    env = clean_env(DJANGO_DEBUG="1", MEMORYADMIN_VAR_DIR=str(var))
    result = manage("migrate", "--noinput", "-v0", env=env)
    assert result.returncode == 0, result.stderr
    assert mode(var) == 0o700
    key = (var / "secret-key").read_text().strip()
    assert len(key) >= 50
    assert mode(var / "secret-key") == 0o600
    assert mode(var / "memoryadmin.sqlite3") == 0o600
    assert (var / "memoryadmin.sqlite3").stat().st_size > 0
    # Generated once: the next command keeps the same key.
    again = manage(
        "shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)", env=env
    )
    assert again.stdout.strip().splitlines()[-1] == key


def development_var(tmp_path: Path) -> Path:
    """var/ as `make run` leaves it: the secret key it generated is in it."""
    var = tmp_path / "var"
    done = manage("check", env=clean_env(DJANGO_DEBUG="1", MEMORYADMIN_VAR_DIR=str(var)))
    assert done.returncode == 0, done.stderr
    assert (var / "secret-key").is_file()
    return var


def test_manage_py_on_a_development_checkout_uses_its_secrets(tmp_path: Path) -> None:
    """Without any variable, as the README's shell blocks run (tests/test_readme.py)."""
    var = development_var(tmp_path)
    shown = "from django.conf import settings as s; print(s.SECRET_KEY, s.DEBUG)"
    done = manage("shell", "-c", shown, env=clean_env(MEMORYADMIN_VAR_DIR=str(var)))
    assert done.returncode == 0, done.stderr
    key = (var / "secret-key").read_text().strip()
    assert done.stdout.splitlines()[-1].split() == [key, "False"]


@pytest.mark.parametrize(
    "configured",
    [
        {"DJANGO_DEBUG": "0"},
        {"DJANGO_SECRET_KEY": "a-production-key-" * 4},
        {"MEMORYADMIN_PARTITION_SECRET": "a-production-secret"},
    ],
    ids=["debug-off", "secret-key-set", "partition-secret-set"],
)
def test_a_process_configured_for_production_ignores_a_checkouts_secrets(
    tmp_path: Path, configured: dict[str, str]
) -> None:
    var = development_var(tmp_path)
    env = clean_env(MEMORYADMIN_VAR_DIR=str(var), **configured)
    done = manage("check", env=env)
    assert done.returncode != 0
    missing = "DJANGO_SECRET_KEY" if "DJANGO_SECRET_KEY" not in configured else "MEMORYADMIN_"
    assert missing in done.stderr
    assert "must be set when DJANGO_DEBUG is off" in done.stderr


def test_gunicorn_refuses_to_start_on_a_checkouts_secrets(tmp_path: Path) -> None:
    """The production server needs its own secrets even where `make run` has run."""
    var = development_var(tmp_path)
    env = clean_env(
        MEMORYADMIN_VAR_DIR=str(var),
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        GUNICORN_BIND=f"127.0.0.1:{free_port()}",
        WEB_CONCURRENCY="1",
    )
    done = subprocess.run(
        [GUNICORN, "--config", "gunicorn.conf.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off" in done.stderr
    assert "Worker failed to boot" in done.stderr


def test_a_sqlite_url_file_is_created_private(tmp_path: Path) -> None:
    env = clean_env(**production_env(), MEMORYADMIN_VAR_DIR=str(tmp_path / "var"))
    env["DATABASE_URL"] = f"sqlite:///{tmp_path}/db.sqlite3"
    result = manage("migrate", "--noinput", "-v0", env=env)
    assert result.returncode == 0, result.stderr
    assert mode(tmp_path / "db.sqlite3") == 0o600


def test_demo_secrets_in_var_are_private(db: None, settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    demo_setup()
    for name in ("demo-api-key", "demo-logins.json"):
        assert mode(tmp_path / name) == 0o600, name


def test_password_validators_refuse_weak_passwords() -> None:
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        validate_password("12345678")
    validate_password("a-long-test-password-1")


@pytest.mark.django_db(transaction=True)
def test_gunicorn_serves_compressed_hashed_static_files_in_production(
    tmp_path: Path, migrated_sqlite: Any
) -> None:
    """The production command of the Makefile (collectstatic, then gunicorn), on a migrated
    database, on a loopback port behind a (simulated) TLS-terminating proxy."""
    env = clean_env(
        **production_env(),
        MEMORYADMIN_VAR_DIR=str(tmp_path / "var"),
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
    )
    env["DATABASE_URL"] = f"sqlite:///{migrated_sqlite(tmp_path / 'db.sqlite3')}"
    env["MEMORYADMIN_METRICS_TOKEN"] = "scrape-token"
    result = manage("collectstatic", "--noinput", "-v0", env=env)
    assert result.returncode == 0, result.stderr
    headers = {"Host": "memory.example.com", "X-Forwarded-Proto": "https"}
    with gunicorn(env, workers=2) as base:
        # Plain HTTP (no proxy header) is redirected to HTTPS; probes are not.
        insecure = httpx.get(base + "/login/", headers={"Host": "memory.example.com"})
        assert insecure.status_code == 301
        assert insecure.headers["location"] == "https://memory.example.com/login/"
        assert (
            httpx.get(base + "/healthz", headers={"Host": "memory.example.com"}).status_code == 200
        )

        page = httpx.get(base + "/login/", headers=headers)
        assert page.status_code == 200
        assert page.headers["strict-transport-security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        match = re.search(r'href="(/static/memoryadmin/memory\.[0-9a-f]{12}\.css)"', page.text)
        assert match, page.text
        css = httpx.get(base + match.group(1), headers={**headers, "Accept-Encoding": "gzip"})
        assert css.status_code == 200
        assert css.headers["content-encoding"] == "gzip"
        assert "immutable" in css.headers["cache-control"]
        assert css.text == (Path("static/memoryadmin/memory.css")).read_text()
        # Files are served from STATIC_ROOT only: the source folders are not searched.
        assert (
            httpx.get(base + "/static/memoryadmin/nothing.css", headers=headers).status_code == 404
        )


def test_gunicorn_keeps_its_workers_and_warms_them_by_default(monkeypatch: Any) -> None:
    """Workers are not recycled unless asked (nothing leaks, and a new worker imports
    the project again), and each imports the URLconf before it accepts a request."""
    import runpy

    # The file sets these for the server's workers; the test's process gets its own back
    # (set first, so that monkeypatch removes afterwards what was not there: a metrics
    # folder left in this process's environment, removed below, broke the processes
    # later tests start).
    names = ["GUNICORN_MAX_REQUESTS", "GUNICORN_MAX_REQUESTS_JITTER"]
    exported = [
        "PROMETHEUS_MULTIPROC_DIR",
        "MEMORYADMIN_REQUEST_THREADS",
        "MEMORYADMIN_SERVES_REQUESTS",
    ]
    for name in [*names, *exported]:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert conf["max_requests"] == 0
    assert conf["max_requests_jitter"] == 0
    conf["post_worker_init"](None)  # imports every URLconf; raises if one cannot load
    # ... and freezes what exists then, out of the collector's full passes.
    assert gc.get_freeze_count() > 10000
    gc.unfreeze()
    # The share of request threads follows what the workers really run, options included.
    for threads in (1, 4, 16):
        conf["on_starting"](
            SimpleNamespace(cfg=SimpleNamespace(threads=threads, worker_class=object))
        )
        assert os.environ["MEMORYADMIN_REQUEST_THREADS"] == str(threads)
        assert os.environ["MEMORYADMIN_SERVES_REQUESTS"] == "1"
    monkeypatch.setenv("GUNICORN_MAX_REQUESTS", "5000")
    shutil.rmtree(conf["_metrics_dir"], ignore_errors=True)
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert conf["max_requests"] == 5000
    shutil.rmtree(conf["_metrics_dir"], ignore_errors=True)


# What starting a process does not import (docs/decisions.md, Performance): each is
# imported by its first use, and the first use of each below shows it then is.
FIRST_USE = {
    # The HTTP client of provider calls and webhooks (gunicorn's workers import it
    # before they accept).
    "httpx": "from memoryadmin.core.exchange import Reply; Reply()",
    # The JSON Schema validator of tool arguments (the reference provider's too).
    "jsonschema": "from memoryadmin.core.tools import tool_arguments_validate as v; "
    "v(tool={'name': 't', 'input': {'type': 'object'}}, arguments={})",
    # The signing library of erasure receipts.
    "cryptography": "from memoryadmin.erasures.receipts import public_key; public_key()",
}


def test_starting_a_process_leaves_what_it_may_never_use_unimported(tmp_path: Path) -> None:
    """Neither Django's start (every command, the worker, the MCP server) nor the system
    checks, which load every URLconf and the views they name, import these."""
    names = list(FIRST_USE)
    code = "\n".join(
        [
            "import io, sys, django",
            "from django.core.management import call_command",
            "django.setup()",
            "call_command('check', stdout=io.StringIO())",
            f"print(' '.join(n for n in {names!r} if n in sys.modules))",
            *FIRST_USE.values(),
            f"print(' '.join(n for n in {names!r} if n in sys.modules))",
        ]
    )
    env = clean_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        MEMORYADMIN_DEV_SECRETS="1",
        MEMORYADMIN_VAR_DIR=str(tmp_path),
    )
    done = python("-c", code, env=env)
    assert done.returncode == 0, done.stderr
    at_start, after_use = done.stdout.split("\n")[:2]
    assert at_start == ""
    assert after_use.split() == names


def test_the_bench_floors_are_off_in_production(client: Any) -> None:
    from django.core.handlers.wsgi import WSGIHandler

    from memoryadmin import benchfloors, wsgi

    assert type(wsgi.application) is WSGIHandler  # no raw answer in front of Django
    assert client.get(benchfloors.RAW_PATH).status_code == 404
    assert client.get(benchfloors.CONSTANT_API_PATH).status_code == 404

    # What the bench serves: the raw path answered without Django, the rest passed on.
    seen: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["PATH_INFO"])
        start_response("204 No Content", [])
        return []

    statuses: list[str] = []
    wrapped = benchfloors.raw_wsgi(app)
    body = wrapped({"PATH_INFO": benchfloors.RAW_PATH}, lambda s, h: statuses.append(s))
    assert b"".join(body) == benchfloors.CONSTANT
    assert wrapped({"PATH_INFO": "/healthz"}, lambda s, h: statuses.append(s)) == []
    assert statuses == ["200 OK", "204 No Content"]
    assert seen == ["/healthz"]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("inf", "must be a finite number, not inf"),
        ("nan", "must be a finite number, not nan"),
        ("0", "must be at least 1, not 0"),
        ("soon", "must be a number, not 'soon'"),
    ],
)
def test_a_number_of_seconds_out_of_its_range_is_refused(
    raw: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from memoryadmin.settings import env_float

    monkeypatch.setenv("MEMORYADMIN_EXPORT_SECONDS", raw)
    with pytest.raises(ImproperlyConfigured, match=f"^MEMORYADMIN_EXPORT_SECONDS {says}$"):
        env_float("MEMORYADMIN_EXPORT_SECONDS", 600.0, minimum=1)
