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
    from django.db import connection, connections

    from billing.services import hold_open
    from config.errors import InsufficientQuota

    org, project, key, prefix, attempts, threads, amount = sys.argv[1:8]
    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    ok: list[str] = []
    errors: list[str] = []
    refused = 0
    lock = threading.Lock()

    def work(t: int) -> None:
        nonlocal refused
        try:
            for i in range(t, int(attempts), int(threads)):
                rid = f"{prefix}-{i}"
                try:
                    hold_open(
                        organization_id=int(org),
                        project_id=int(project),
                        api_key_id=int(key),
                        request_id=rid,
                        amount_nanos=int(amount),
                    )
                except InsufficientQuota:
                    with lock:
                        refused += 1
                except Exception as exc:  # reported to the test, which fails on any
                    with lock:
                        errors.append(repr(exc))
                else:
                    with lock:
                        ok.append(rid)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=work, args=(t,)) for t in range(int(threads))]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    print(json.dumps({"ok": ok, "refused": refused, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()
