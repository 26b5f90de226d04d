#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A configuration mistake (such as a missing secret key) is one line
        # telling the operator what to set, not a traceback through Django.
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
