"""Local development (`make run`): ``base`` plus DEBUG.

Without ``DJANGO_SECRET_KEY`` the instance uses a key of its own, generated into its data
directory on first start (``var/secret_key``, mode 0600), never the constant in the
repository: anyone could otherwise forge this instance's e-mail verification and password
reset tokens and session cookies.
"""

import os
import secrets
import time
from pathlib import Path

from config.settings.base import *  # noqa: F403
from config.settings.base import DATA_DIR, env

DEBUG = env.bool("DJANGO_DEBUG", default=True)


def instance_secret_key(data_dir: Path) -> str:
    """The key kept in ``data_dir/secret_key``, created (0600) by the first process to ask.

    ``make run`` starts several processes at once: the file is created exclusively, and a
    process that loses the race reads the winner's key.
    """
    path = data_dir / "secret_key"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # the winner may not have written it yet
            key = path.read_text().strip()
            if key:
                return key
            time.sleep(0.02)
        raise
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


SECRET_KEY = env("DJANGO_SECRET_KEY", default="") or instance_secret_key(DATA_DIR)
