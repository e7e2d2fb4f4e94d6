"""``config.server``'s process freezes what it loaded before serving (``settle_the_heap``), so
a full garbage collection does not walk Django and the app on the event loop; garbage made
while serving is still collected. Counts, not timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.live import ROOT

_PROBE = """
import gc, json, weakref
from config.server import GC_YOUNG_THRESHOLD, build, settle_the_heap
build("127.0.0.1", 0)
settle_the_heap()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made while serving
gone = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"frozen": gc.get_freeze_count(), "young": gc.get_threshold()[0],
                  "expected_young": GC_YOUNG_THRESHOLD, "cycle_collected": gone() is None}))
"""


def test_the_server_freezes_its_loaded_heap_and_still_collects_new_garbage() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["frozen"] > 100_000  # Django, the app and its dependencies
    assert facts["young"] == facts["expected_young"] > 700
    assert facts["cycle_collected"] is True
