#!/usr/bin/env python
"""Django's command-line utility for memoryadmin."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
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
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
