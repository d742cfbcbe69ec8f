"""Test settings: the product's settings with a fast password hasher.

Django's default PBKDF2 costs most of a second per hash on a small machine and
the persona fixtures hash four passwords per test; hashing strength is not what
the suite tests.

The suite runs with DEBUG off, like production, but generates missing secrets
like development (subprocesses it starts inherit that) and serves static files
from their source folders, so it needs no `collectstatic`.
"""

import os

os.environ.setdefault("MEMORYADMIN_DEV_SECRETS", "1")

from memoryadmin.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# The suite's providers (the reference provider, fake providers) are real
# servers on 127.0.0.1: the tests allow loopback as `make run` does. Tests of
# the default (nothing but public addresses) set this back to [].
MEMORYADMIN_PROVIDER_ALLOW = ["127.0.0.0/8", "::1/128"]
