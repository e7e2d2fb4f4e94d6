"""infrai's own HTTP layer (:class:`inference.http.V1App`) against Starlette's, measured
interleaved in one run: the decision of issue 32, kept in ``make bench``.

    .venv/bin/python bench/http_layer.py               # prints a markdown table
    .venv/bin/python bench/http_layer.py --write-doc   # … and puts it into docs/performance.md

Each pass is one ``bench/compare.py`` run without the peers (``--asgi uvicorn``: the production
app; ``--asgi starlette``: the same server, routes and handlers on Starlette's routing and
request handling, ``bench/starlette_v1.py``), in the order ours, Starlette, Starlette, ours,
… so that machine drift cancels; the table has the median of each figure over its passes.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import machine, write_doc  # noqa: E402

PY = ROOT / ".venv/bin/python"
# "round 1 chat c=16       infrai        541/s p50   29.32 ms  cpu   1.30 ms/call  pg 1.12 ms"
_LINE = re.compile(
    r"^round \d+ (?P<workload>.+?)\s+infrai\s+(?P<rate>[\d.]+)/s .*?cpu\s+(?P<cpu>[\d.]+) ms/call"
)
WORKLOADS = ("chat c=1", "chat c=16", "chat c=16 x16", "stream c=1", "embeddings c=1")
APPS = {"uvicorn": "ours (`inference.http.V1App`)", "starlette": "Starlette 1.x routing + Request"}


def one_pass(asgi: str, scale: float) -> dict[str, tuple[float, float]]:
    """``{workload: (calls/s, gateway CPU ms per call)}`` of one compare.py run."""
    out = subprocess.run(
        [
            str(PY),
            str(ROOT / "bench/compare.py"),
            "--litellm",
            "",
            "--portkey",
            "",
            "--rounds",
            "1",
            "--scale",
            str(scale),
            "--asgi",
            asgi,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=True,
    ).stdout  # fmt: skip  (the rounds are reported on stderr)
    found = {}
    for line in out.splitlines():
        match = _LINE.match(line)
        if match:
            found[match["workload"].strip()] = (float(match["rate"]), float(match["cpu"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="passes of each app")
    parser.add_argument("--scale", type=float, default=0.5)
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {app: [] for app in APPS}
    order = ["uvicorn", "starlette"]
    for index in range(args.pairs * 2):
        app = order[(index + index // 2) % 2]  # ours, Starlette, Starlette, ours, …
        runs[app].append(one_pass(app, args.scale))
        print(f"pass {index + 1}: {app} {runs[app][-1]}", flush=True)
    rows = ["| workload | " + " | ".join(APPS.values()) + " | Starlette ÷ ours (CPU) |"]
    rows.append("|---|" + "---:|" * (len(APPS) + 1))
    for workload in WORKLOADS:
        cells, cpu = [], {}
        for app in APPS:
            passes = [r[workload] for r in runs[app] if workload in r]
            rate = statistics.median(p[0] for p in passes)
            cpu[app] = statistics.median(p[1] for p in passes)
            cells.append(f"{rate:,.0f}/s · {cpu[app]:.2f} ms CPU")
        ratio = cpu["starlette"] / cpu["uvicorn"] if cpu["uvicorn"] else float("nan")
        rows.append(f"| {workload} | " + " | ".join(cells) + f" | {ratio:.2f}× |")
    text = (
        f"Run on {machine()}; {args.pairs} passes of each app, interleaved, scale "
        f"{args.scale}; calls/s · gateway CPU per call (median over passes).\n\n" + "\n".join(rows)
    )
    print(text)
    if args.write_doc:
        write_doc(text, "bench/http_layer.py", lambda doc, block: doc + "\n" + block + "\n")


if __name__ == "__main__":
    main()
