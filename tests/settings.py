"""Test settings: the product's settings with a fast password hasher.

Django's default PBKDF2 costs most of a second per hash on a small machine and
the persona fixtures hash four passwords per test; hashing strength is not what
the suite tests.
"""

from memoryadmin.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The suite's providers (the reference provider, fake providers) are real
# servers on 127.0.0.1: the tests allow loopback as `make run` does. Tests of
# the default (nothing but public addresses) set this back to [].
MEMORYADMIN_PROVIDER_ALLOW = ["127.0.0.0/8", "::1/128"]
