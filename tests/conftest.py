"""Shared fixtures: projects, keys of every scope, a deployed resource, documents, API and
Memory page clients, an agent session, and the browser of the browser tests."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.memory.models import Deployment, Document, Project, Resource
from memoryadmin.memory.services.deployments import (
    deployment_create,
    deployment_promote,
    resource_get,
)
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.memory.services.projects import project_create
from tests.helpers import (
    BROWSER_ARGS,
    CHROMIUM,
    MANIFEST_MEMORY,
    PASSWORD,
    Keys,
    People,
    SlowNames,
    agent_save,
    chromium_features_kept,
    clean_env,
    manage,
    slow_lookups,
    support_session,
)


def _xdist_controller(config: pytest.Config) -> bool:
    """This process is the controller of a parallel run (`-n`): it starts the workers."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _test_modules_rewritten_once(
    config: pytest.Config, folder: Path = Path(__file__).parent
) -> None:
    """The xdist controller rewrites the test modules' asserts (pytest's import hook) and
    keeps them in the bytecode cache before it starts the workers. Otherwise, in a new
    checkout, every worker rewrites every test module at once (about 4 s of CPU each, eight
    times the modules' plain compiling), none finding another's cache yet. The cached file
    is the one pytest's hook writes and checks (its source's hash): a worker reads it as
    its own. Where pytest's hook is not as expected, the workers rewrite as before."""
    if sys.dont_write_bytecode:
        return
    try:
        from _pytest.assertion import rewrite

        hook = next(h for h in sys.meta_path if isinstance(h, rewrite.AssertionRewritingHook))
        state = config.stash[rewrite.assertstate_key]
        for source in sorted(folder.glob("*.py")):
            if not hook._should_rewrite(f"{folder.name}.{source.stem}", str(source), state):
                continue
            cache = rewrite.get_cache_dir(source)
            pyc = cache / (source.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(source, pyc) is not None or not rewrite.try_makedirs(cache):
                continue
            source_hash, code = rewrite._rewrite_test(source, config)
            rewrite._write_pyc(state, code, source_hash, pyc)
    except (ImportError, AttributeError, KeyError, StopIteration, TypeError) as exc:
        config.issue_config_time_warning(
            pytest.PytestWarning(f"test modules not rewritten ahead of the workers: {exc!r}"), 2
        )


def pytest_configure(config: pytest.Config) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (`make test` unsets it: Python then keeps the
    bytecode in the checkout's ignored __pycache__ folders, for every process of this run
    and the next), the Python processes the tests start (manage.py commands, servers,
    workers, examples: over a hundred a run) share one bytecode cache for the run, in a
    temporary folder, instead of each compiling memoryadmin's modules again.

    The pytest processes themselves keep the bytecode they start with (a cache of their
    own, empty, would cost each xdist worker seconds more than it saves): the first one
    makes the folder and passes it on in _MEMORYADMIN_TEST_PYCACHE; each one that runs
    tests sets PYTHONPYCACHEPREFIX for its children only. One already set is kept."""
    if _xdist_controller(config):
        _test_modules_rewritten_once(config)
    if os.environ.get("PYTHONPYCACHEPREFIX") or not sys.dont_write_bytecode:
        return
    prefix = os.environ.get("_MEMORYADMIN_TEST_PYCACHE")
    if prefix is None:
        prefix = tempfile.mkdtemp(prefix="memoryadmin-pycache-")
        os.environ["_MEMORYADMIN_TEST_PYCACHE"] = prefix
        config.add_cleanup(lambda: shutil.rmtree(prefix, ignore_errors=True))
    if _xdist_controller(config):
        return  # it starts the workers, and runs no test
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.hookimpl(wrapper=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Generator[None, int, int]:
    """`-n auto` (`make test`) starts two workers per core xdist counts, not one: most of
    a worker's time goes waiting (on the processes, servers and browsers its tests start,
    on the deadlines they prove), and with one worker a core the run kept the machine's
    cores about two-thirds busy. More than two a core made it slower again: each worker
    collects the suite and builds its database (docs/performance.md, The test suite).
    A count set in PYTEST_XDIST_AUTO_NUM_WORKERS is taken as it is."""
    cores = yield
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return cores
    return 2 * cores


# What decides the static files WhiteNoise finds and how it serves them.
_STATIC_FILES_SETTINGS = [
    "DEBUG",
    "STATIC_URL",
    "STATICFILES_DIRS",
    "STATICFILES_FINDERS",
    "INSTALLED_APPS",
    "FORCE_SCRIPT_NAME",
    *(
        f"WHITENOISE_{name}"
        for name in (
            "AUTOREFRESH",
            "MAX_AGE",
            "ALLOW_ALL_ORIGINS",
            "CHARSET",
            "MIMETYPES",
            "ADD_HEADERS_FUNCTION",
            "INDEX_FILE",
            "IMMUTABLE_FILE_TEST",
            "USE_FINDERS",
            "STATIC_PREFIX",
        )
    ),
]


def _static_files_found_once() -> None:
    """WhiteNoise finds the static files once per test process, not once per Client.

    Every Django test client (and APIClient) loads the middleware on its first request,
    and WhiteNoiseMiddleware, serving from the source folders (WHITENOISE_USE_FINDERS,
    tests/settings.py), then lists and stats every static file again: most of the cost of
    a client's first request, thousands of times a run. A deployed process builds the same
    table once, at start-up. The table built for the same settings is reused; anything
    that changes what the finders see or how files are served builds a new one."""
    from django.conf import settings
    from whitenoise.middleware import WhiteNoiseMiddleware

    scan = WhiteNoiseMiddleware.add_files_from_finders
    tables: dict[str, dict[str, Any]] = {}

    def add_files_from_finders(self: WhiteNoiseMiddleware) -> None:
        key = repr(
            [self.static_prefix, self.max_age]
            + [getattr(settings, name, None) for name in _STATIC_FILES_SETTINGS]
        )
        if key not in tables:
            kept, self.files = self.files, {}
            try:
                scan(self)
                tables[key] = self.files
            finally:
                self.files = {**kept, **self.files}
        else:
            self.files.update(tables[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders


_static_files_found_once()


def _post_flush_rows_replayed() -> None:
    """After the first flush of a test that commits, the rows that post_migrate writes back
    are written from a record of them, not by running every app's post_migrate again.

    Each test that commits (a transactional test: servers, browsers, processes) ends with
    Django's `flush`, which empties every table and then sends post_migrate so that the
    content types and permissions exist again: 45 ms a test, of which the flush itself is
    2. When the receivers are Django's own (contenttypes, auth) and the tables are empty,
    their result is always the same rows: written in the same order (so with the ids the
    receivers would give them), and the content type cache emptied as they leave it.
    Otherwise post_migrate runs as it does without this."""
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType
    from django.core.management.commands import flush
    from django.core.management.sql import emit_post_migrate_signal as emit
    from django.db.models.signals import post_migrate

    records: dict[Any, tuple[list[tuple[str, str]], list[tuple[int, str, str]]]] = {}
    own = {"django.contrib.auth.management", "django.contrib.contenttypes.management"}

    def only_django_s_own() -> bool:
        receivers = [entry[1] for entry in post_migrate.receivers]
        found = [r() if isinstance(r, weakref.ReferenceType) else r for r in receivers]
        return all(getattr(receiver, "__module__", None) in own for receiver in found)

    def emit_post_migrate_signal(verbosity: int, interactive: bool, db: str, **kwargs: Any) -> None:
        key = (db, tuple(receiver[0] for receiver in post_migrate.receivers))
        types = ContentType.objects.using(db)
        permissions = Permission.objects.using(db)
        empty = not types.exists() and not permissions.exists()
        if key not in records or not empty or verbosity >= 2 or kwargs or not only_django_s_own():
            emit(verbosity, interactive, db, **kwargs)
            if empty and not kwargs:
                made = list(types.order_by("id"))
                position = {ct.pk: n for n, ct in enumerate(made)}
                records[key] = (
                    [(ct.app_label, ct.model) for ct in made],
                    [
                        (position[p.content_type_id], p.codename, p.name)
                        for p in permissions.order_by("id")
                    ],
                )
            return
        made_types, made_permissions = records[key]
        types.bulk_create([ContentType(app_label=a, model=m) for a, m in made_types])
        ids = list(types.order_by("id").values_list("id", flat=True))
        permissions.bulk_create(
            [
                Permission(content_type_id=ids[n], codename=codename, name=name)
                for n, codename, name in made_permissions
            ]
        )
        ContentType.objects.clear_cache()

    flush.emit_post_migrate_signal = emit_post_migrate_signal  # type: ignore[attr-defined]


_post_flush_rows_replayed()


def _flush_by_delete_on_postgresql() -> None:
    """On PostgreSQL, the flush that ends each test that commits empties the tables with
    one `DELETE` each, not one `TRUNCATE` of them all.

    `TRUNCATE` gives every table, index and TOAST table a new file and drops the old ones
    at commit: about 0.2 s a flush with this project's tables, most of a short committing
    test's time, where deleting the few rows a test leaves takes milliseconds. The foreign
    keys Django creates are deferred to the commit, by which every table is empty. A flush
    that resets sequences still truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        self: Any,
        style: Any,
        tables: Any,
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"DELETE FROM {self.quote_name(table)};" for table in tables
        ]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]


_flush_by_delete_on_postgresql()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip)
    # The long tests first, the many short ones last, so that the workers of `-n auto`
    # end together (with `--dist worksteal`, pyproject.toml) instead of one running the
    # last server or browser test alone. The long ones are the tests that commit
    # (servers, browsers, processes; pytest-django, whose ordering this runs after, puts
    # them after the others) and those without the database (processes); the short ones
    # run in a transaction rolled back after them. The order is otherwise kept: modules
    # stay together, for their module fixtures.
    items.sort(key=_rolled_back)


def _rolled_back(item: Any) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    if "transactional_db" in fixtures or "live_server" in fixtures:
        return False
    marker = item.get_closest_marker("django_db")
    if marker is not None:
        return not (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences"))
    return "db" in fixtures


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    """Every test starts with an empty cache: no key look-ups or rate counts of another test."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _rate_windows_start_with_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate limits' fixed windows are the clock's (a minute from each whole minute):
    a test counting its requests against a limit a minute long crossed a window's end now
    and then on a slow machine, and its count started again. Here the windows' clock is
    moved on to the next whole hour, so each test's windows start as it starts."""
    import math
    import time

    from memoryadmin.memory.services import rate_limits

    started = time.time()
    ahead = math.ceil(started / 3600) * 3600 + 0.001 - started

    class Clock:
        @staticmethod
        def time() -> float:
            return time.time() + ahead

    monkeypatch.setattr(rate_limits, "time", Clock)


@pytest.fixture
def echo_kind() -> Iterator[Any]:
    """The test-only `echo` provider kind (tests/echo_provider.py), registered for one test."""
    from memoryadmin.memory.providers import provider_register, provider_unregister
    from tests.echo_provider import EchoProvider

    provider = EchoProvider()
    provider_register(provider)
    yield provider
    provider_unregister(provider.kind)


@pytest.fixture
def scripted() -> Iterator[Any]:
    """A scripted http provider on loopback (tests/helpers.py ScriptedProvider)."""
    from tests.helpers import ScriptedProvider, serve

    server = ScriptedProvider()
    try:
        yield from serve(server)
    finally:
        server.release.set()


@pytest.fixture
def mem0_oss() -> Iterator[Any]:
    """A fake self-hosted Mem0 server on loopback, expecting the X-API-Key mem0-test-key."""
    from tests.fake_providers import FakeMem0Oss, running

    with running(FakeMem0Oss(api_key="mem0-test-key")) as server:
        yield server


@pytest.fixture
def hindsight() -> Iterator[Any]:
    """A fake Hindsight 0.8 server on loopback, expecting the bearer token hindsight-test."""
    from tests.fake_providers import FakeHindsight, running

    with running(FakeHindsight(token="hindsight-test")) as server:
        yield server


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """`migrated_sqlite(path)` puts a migrated, empty SQLite database at `path`, for the
    processes a test starts whose set-up is "a migrated database" (not the migration
    itself: tests of `migrate` run it). The database is migrated once for the run, by
    `manage.py migrate` as a deployment runs it, and shared by every xdist worker: a
    migration costs seconds of CPU, a copy milliseconds."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    template = shared / "migrated.sqlite3"
    with (shared / "migrated.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            building = shared / "migrated.building.sqlite3"
            env = clean_env(
                DATABASE_URL=f"sqlite:///{building}",
                MEMORYADMIN_DEV_SECRETS="1",
                MEMORYADMIN_VAR_DIR=str(shared / "migrated-var"),
            )
            done = manage("migrate", "--noinput", "-v0", env=env)
            assert done.returncode == 0, done.stderr
            building.rename(template)

    def copy(path: Path) -> Path:
        shutil.copy(template, path)
        return path

    return copy


@pytest.fixture(scope="session")
def provider_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """A self-signed certificate for 127.0.0.1: the TLS of the https-only fake providers."""
    from tests.fake_providers import test_certificate

    return test_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def provider_tls(provider_certificate: tuple[Any, Any], settings: Any) -> Any:
    """Server-side TLS for a fake provider, its certificate trusted as a private CA."""
    from tests.fake_providers import server_tls

    settings.MEMORYADMIN_PROVIDER_CA_FILE = str(provider_certificate[0])
    return server_tls(*provider_certificate)


@pytest.fixture
def mem0_platform(provider_tls: Any) -> Iterator[Any]:
    """A fake api.mem0.ai on https://127.0.0.1, expecting the API key mem0-platform-key."""
    from tests.fake_providers import FakeMem0Platform, running

    with running(FakeMem0Platform(api_key="mem0-platform-key", tls=provider_tls)) as server:
        yield server


@pytest.fixture
def vertex(provider_tls: Any) -> Iterator[Any]:
    """A fake Vertex AI Memory Bank (and its token endpoint) on https://127.0.0.1."""
    from tests.fake_providers import FakeVertexMemoryBank, running

    with running(FakeVertexMemoryBank(tls=provider_tls)) as server:
        yield server


@pytest.fixture
def project(db: None) -> Project:
    project = project_create(project_id="acme", name="Acme", actor="test")
    deployment_create(
        project=project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="development",
        actor="test",
    )
    return project


@pytest.fixture
def other_project(db: None) -> Project:
    return project_create(project_id="globex", name="Globex", actor="test")


@pytest.fixture
def keys(project: Project, other_project: Project) -> Keys:
    return Keys(
        owner=api_key_create(project_id=project.id)[1],
        read_only=api_key_create(project_id=project.id, read_only=True)[1],
        other=api_key_create(project_id=other_project.id)[1],
        all_projects=api_key_create(project_id=None)[1],
    )


@pytest.fixture
def notes(project: Project) -> Resource:
    return resource_get(project=project, environment="development", resource_id="notes")


@pytest.fixture
def make_document(notes: Resource) -> Callable[..., Any]:
    def make(doc_id: str = "workshop", **fields: Any) -> Any:
        fields.setdefault("title", doc_id.title())
        resource = fields.pop("resource", notes)
        return document_create(resource=resource, doc_id=doc_id, actor="test", **fields)

    return make


@pytest.fixture
def client_for() -> Callable[[str | None], APIClient]:
    def make(key: str | None) -> APIClient:
        client = APIClient()
        if key is not None:
            client.credentials(HTTP_X_API_KEY=key)
        return client

    return make


@pytest.fixture
def api(client_for: Callable[[str | None], APIClient], keys: Keys) -> APIClient:
    return client_for(keys.owner)


# Memory page personas: a user per role on "acme", and an outsider who owns
# another project and has no role on "acme".


@pytest.fixture
def people(project: Project, other_project: Project) -> People:
    from django.contrib.auth import get_user_model

    from memoryadmin.web.services.roles import role_grant

    model = get_user_model()
    users = {}
    for persona, name, project_id, role in [
        ("owner", "olivia", "acme", "owner"),
        ("support", "sam", "acme", "support"),
        ("viewer", "vera", "acme", "viewer"),
        ("outsider", "oscar", "globex", "owner"),
    ]:
        users[persona] = model.objects.create_user(username=name, password=PASSWORD)
        role_grant(username=name, project_id=project_id, role=role, actor="test")
    return People(**users)


@pytest.fixture
def web_client_for() -> Callable[[Any], Any]:
    """A Django test client logged in as the given user (None: anonymous)."""
    from django.test import Client

    def make(user: Any) -> Client:
        client = Client()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def web(people: People, web_client_for: Callable[[Any], Any]) -> Callable[[str], Any]:
    """A Django test client logged in as a persona: "owner", "support", "viewer", "outsider"."""
    return lambda persona: web_client_for(getattr(people, persona))


@pytest.fixture
def owner(web: Callable[[str], Any]) -> Any:
    return web("owner")


@pytest.fixture
def support(web: Callable[[str], Any]) -> Any:
    return web("support")


@pytest.fixture
def workshop(make_document: Callable[..., Any]) -> Document:
    """notes/workshop, the document agent sessions bind."""
    document: Document = make_document(
        "workshop", text="Exercises must run on Node.js 22.", summary="Runtime."
    )
    return document


@pytest.fixture
def session(project: Project, workshop: Document) -> Session:
    """A support-bot session bound read-write to notes/workshop and to the kb collection."""
    return support_session(project)


# The browser tests: the system Chromium driven by Playwright.


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    # Waits long enough for a machine busy with the rest of the suite (CI runs two
    # workers on two cores): a page that works answers in well under a second.
    expect.set_options(timeout=15_000)
    # Playwright's sync API keeps an event loop running in this thread while
    # the browser is open; the ORM calls of the tests (and of the database
    # flush between them) are still plain synchronous code.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=BROWSER_ARGS, headless=True
            )
            chromium_features_kept()
            yield browser
            browser.close()
            # The module's tests ran while Playwright's loop ran in this thread, so their
            # database connections are the ones asgiref's context-local storage kept for
            # that loop: closed here, or the pool's close at the session's end misses them
            # and dropping the test database fails (a connection still uses it).
            from django.db import connections

            connections.close_all()


@pytest.fixture
def contexts(browser: Any) -> Iterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for context in opened:
        context.close()


@pytest.fixture
def open_page(browser: Any, contexts: list[Any], live_server: Any) -> Any:
    """A page in a fresh browser context (its own cookies), logged in as `username` and on
    the project's development page, or on `path` when one is given (the page must answer
    there, not redirect: a test whose first page is elsewhere loads no other first).
    `through_form=True` logs in as a person does, through the login form; otherwise the
    context starts with the session cookie of a login (`Client.force_login`), so that the
    test's page is the first one the browser loads (the form is a page load, a post and a
    redirect: most of a second on a busy machine)."""

    def make(
        username: str, path: str | None = None, *, through_form: bool = False, **options: Any
    ) -> Any:
        options.setdefault("viewport", {"width": 1280, "height": 860})
        context = browser.new_context(base_url=live_server.url, **options)
        context.set_default_timeout(20_000)
        contexts.append(context)
        page = context.new_page()
        # Script errors and console errors such as CSP violations; not the
        # console's note about 4xx pages, which some scenarios expect.
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: _console_error(message, errors))
        page.js_errors = errors
        if through_form:
            assert path is None, "the login form leads to the development page"
            page.goto("/")
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
        else:
            context.add_cookies([_session_cookie(username, live_server.url)])
            page.goto(path or "/")
        if path is None:
            page.wait_for_url("**/projects/acme/development/")
        else:
            assert page.url == live_server.url + path, page.url
        return page

    return make


def _session_cookie(username: str, url: str) -> dict[str, Any]:
    """The session cookie of `username` logged in, as the login view sets it."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": url,
        "httpOnly": settings.SESSION_COOKIE_HTTPONLY,
        "secure": settings.SESSION_COOKIE_SECURE,
        "sameSite": str(settings.SESSION_COOKIE_SAMESITE),
    }


def _console_error(message: Any, errors: list[str]) -> None:
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        errors.append(message.text)


@pytest.fixture
def used_memory(project: Project, people: People, notes: Resource, make_document: Any) -> Resource:
    """A project that looks used (for the browser tests): documents by owners and agents, a
    frozen one, a retired resource."""
    make_document(
        "workshop",
        title="Workshop notes",
        text="Exercises must run on Node.js 22.\nNo paid external services for the demo.\n",
        summary="Workshop runtime requirements.",
    )
    onboarding = make_document(
        "onboarding",
        title="Onboarding checklist",
        text="1. Create an API key.\n2. Deploy the agent.\n",
        summary="Steps for a new team member.",
    )
    agent_save(
        notes,
        "onboarding",
        onboarding.revision,
        "1. Create an API key.\n2. Deploy the agent.\n3. Bind notes to the session.\n",
        session_id="sess_4f2a9c",
    )
    make_document(
        "workspace-setup",
        title="Workspace set-up",
        text="Clone the repository, then run make run.\n",
        summary="Local environment.",
    )
    make_document(
        "incident-0412",
        title="Incident 04-12: duplicate refunds",
        text="An agent promised two refunds. Frozen while support reviews it.\n",
        summary="Under review.",
        agent_writes=False,
    )
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("refunds", resource=kb, title="Refund policy", text="30 days.")
    deployment_create(
        project=project,
        agent="archivist",
        memory=[{"id": "archive", "description": "Old decisions.", "provider": {}}],
        promote="development",
        actor="test",
    )
    # A newer archivist build declares nothing: "archive" is retired.
    deployment_create(
        project=project, agent="archivist", memory=[], promote="development", actor="test"
    )
    deployment_promote(
        deployment=Deployment.objects.get(project=project, agent="support-bot"),
        environment="production",
        actor="test",
    )
    production_notes = Resource.objects.get(resource_id="notes", environment="production")
    make_document("workshop", resource=production_notes, title="Workshop notes", text="Live.")
    return notes


# Property-based tests: a fixed number of examples, no deadline (shared machines are
# noisy), derandomized so that a failure reproduces on every run and every machine.
hypothesis_settings.register_profile(
    "memoryadmin",
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
hypothesis_settings.load_profile("memoryadmin")


@pytest.fixture
def slow_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowNames]:
    """Names under `.slow.test`: 127.0.0.1, at once until `hang` is set (tests/helpers.py)."""
    with slow_lookups(monkeypatch) as names:
        yield names
