"""Test settings: the product's settings with a fast password hasher.

Django's default PBKDF2 costs most of a second per hash on a small machine and
the persona fixtures hash four passwords per test; hashing strength is not what
the suite tests.
"""

from memoryadmin.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
