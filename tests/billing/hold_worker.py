"""A separate OS process opening holds against the test database (used by test_concurrency).

``python -m tests.billing.hold_worker ORG PROJECT KEY PREFIX ATTEMPTS THREADS AMOUNT``: sets up
Django from the environment (``DATABASE_URL`` = the test database), prints ``ready``, waits for
a line on stdin, then opens ATTEMPTS holds from THREADS threads at once and prints one JSON line
``{"ok": [...request ids...], "refused": n, "errors": [...]}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    from django.db import connection

    from tests.billing.attempts import HoldAttempts

    org, project, key, prefix, attempts, threads, amount = sys.argv[1:8]
    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    holds = HoldAttempts(
        organization_id=int(org),
        project_id=int(project),
        api_key_id=int(key),
        amount_nanos=int(amount),
    )

    def work(t: int) -> None:
        holds.run(f"{prefix}-{i}" for i in range(t, int(attempts), int(threads)))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(int(threads))]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    result = {"ok": holds.ok, "refused": len(holds.refused), "errors": holds.errors}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
