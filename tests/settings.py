"""Test settings: the product's settings with a fast password hasher.

Django's default PBKDF2 costs most of a second per hash on a small machine and
the persona fixtures hash four passwords per test; hashing strength is not what
the suite tests.

The suite runs with DEBUG off, like production, but generates missing secrets
like development (subprocesses it starts inherit that) and serves static files
from their source folders, so it needs no `collectstatic`.
"""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("MEMORYADMIN_DEV_SECRETS", "1")

from memoryadmin.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
# No collected copy either, unless a test names one (DJANGO_STATIC_ROOT, as production
# does): not the checkout's var/static, which `make run` and the benches fill with some
# 300 files, and which WhiteNoise would list and stat again for every test client (most
# of a short test's time on a checkout that has them).
if "DJANGO_STATIC_ROOT" not in os.environ:
    STATIC_ROOT = None  # type: ignore[assignment]

# The suite's providers (the reference provider, fake providers) are real
# servers on 127.0.0.1: the tests allow loopback as `make run` does. Tests of
# the default (nothing but public addresses) set this back to [].
MEMORYADMIN_PROVIDER_ALLOW = ["127.0.0.0/8", "::1/128"]

# SQLite tests use a database file (on tmpfs where there is one), not Django's
# in-memory default: with an in-memory database, the live server's request
# threads and the test share one connection, and two requests at once (a page
# and the lazy load it starts) then interleave their transactions on it.
# With a file, every thread has its own connection and waits for locks as a
# deployed SQLite instance does. The name carries the process id so that
# concurrent runs never share a file.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    _shm = Path("/dev/shm")
    _folder = _shm if _shm.is_dir() and os.access(_shm, os.W_OK) else Path(tempfile.gettempdir())
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(_folder / f"memoryadmin-test-{os.getpid()}.sqlite3")
    }
