#!/usr/bin/env python
"""Django's command-line utility for memoryadmin."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from memoryadmin.core.errors import DomainError
    from memoryadmin.core.strings import strings_check

    try:
        # Undecodable bytes reach Python as unpaired surrogates: refuse them
        # here, for every command, before any of them is stored.
        strings_check(sys.argv[1:], field="arguments")
    except DomainError as exc:
        sys.stderr.write(f"Error: {exc.message}\n")
        sys.exit(6)  # EXIT_INVALID of memoryadmin/core/cli.py
    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A missing secret or a malformed setting stops every command before it starts:
        # one line, as every command fails, not a traceback (unless --traceback asks).
        if "--traceback" in sys.argv:
            raise
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(1)  # EXIT_ERROR of memoryadmin/core/cli.py


if __name__ == "__main__":
    main()
