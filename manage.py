#!/usr/bin/env python
"""Django's command-line utility for the GPU portal."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.management import execute_from_command_line  # noqa: PLC0415 - after the settings variable

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
