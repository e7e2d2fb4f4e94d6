#!/usr/bin/env python
"""Django's command-line utility.

With ``DATABASE_URL`` / ``REDIS_URL`` unset it uses the data directory's own PostgreSQL and Redis
(``config.services``): those ``make run`` started, or, when they do not run, starts them for
the command's length (``manage.py billing_audit`` after ``make run`` has stopped).
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from django.core.management import execute_from_command_line

    from config import services

    with services.serving() as urls:
        os.environ.update(urls)
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
