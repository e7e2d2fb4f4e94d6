"""Throughput and recall of the vector store's engines on random vectors.

For each engine behind :class:`vectors.store.VectorStore`: upsert ``--n`` random float32
vectors of ``--dims`` dimensions in batches of 1,000 (the API's batch limit), then run
``--queries`` random queries (top 10, one at a time; pgvector after building the HNSW
index, as its upkeep task does, once per ``--ef`` value of ``hnsw.ef_search``) and compare
each answer with exact search in numpy over the same vectors (recall@10). Prints a Markdown table.

    DATABASE_URL=postgres://… python bench/vectors.py            # 100k × 384, both engines
    python bench/vectors.py --n 20000 --engines embedded

The embedded engine runs on the database of ``DATABASE_URL`` (migrated first); pgvector runs on
``INFRAI_VECTOR_PG_URL`` when set, else on a PostgreSQL with pgvector started by ``pgserver``
in a temporary directory. Everything the run writes is deleted at the end. Engine-level: no
HTTP, no billing (the API adds a hold and a settlement per call; see the gateway figures).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

if TYPE_CHECKING:
    from vectors.store import VectorStore

BATCH = 1000
TOP_K = 10


@dataclass(frozen=True)
class Result:
    engine: str
    ef_search: int | None
    upsert_per_s: float
    index_build_s: float
    first_query_s: float
    query_per_s: float
    p50_ms: float
    p99_ms: float
    recall: float


def exact_top_k(data: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    """The exact cosine top-``k`` row indices of ``data`` for each query."""
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    out = []
    for q in queries:
        scores = unit @ (q / np.linalg.norm(q))
        out.append(set(np.argpartition(-scores, k)[:k].tolist()))
    return out


@contextmanager
def pgvector_url() -> Iterator[str]:
    url = os.environ.get("INFRAI_VECTOR_PG_URL")
    if url:
        yield url
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="infrai-bench-pgvector-") as data:
        server = pgserver.get_server(data, cleanup_mode="stop")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


def run_engine(
    name: str,
    engine: VectorStore,
    cid: int,
    data: np.ndarray,
    queries: np.ndarray,
    truth: list[set[int]],
    ef_values: list[int | None],
) -> list[Result]:
    """Upsert ``data`` into collection ``cid`` of ``engine``, query it (once per HNSW
    ``ef_search`` value), drop it."""
    from django.conf import settings

    from vectors.store import Item

    dims = data.shape[1]
    started = time.perf_counter()
    for start in range(0, len(data), BATCH):
        items = [
            Item(id=str(i), vector=data[i].tolist())
            for i in range(start, min(start + BATCH, len(data)))
        ]
        engine.upsert(collection_id=cid, dimensions=dims, items=items)
    upsert_s = time.perf_counter() - started
    build_s = 0.0
    if hasattr(engine, "build_index"):
        t0 = time.perf_counter()
        engine.build_index(collection_id=cid, dimensions=dims)
        build_s = time.perf_counter() - t0

    def ask(q: np.ndarray) -> list[str]:
        found = engine.query(
            collection_id=cid, dimensions=dims, vector=q.tolist(), top_k=TOP_K, where={},
            version=1,
        )  # fmt: skip
        return [m.id for m in found]

    results = []
    for ef in ef_values:
        if ef is not None:
            settings.INFRAI_VECTOR_HNSW_EF_SEARCH = ef
        t0 = time.perf_counter()
        ask(queries[0])  # the embedded engine loads the collection here
        first = time.perf_counter() - t0
        latencies, hits = [], 0
        for q, expected in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            ids = ask(q)
            latencies.append(time.perf_counter() - t0)
            hits += len({int(i) for i in ids} & expected)
        lat = np.array(latencies) * 1000
        results.append(
            Result(
                engine=name,
                ef_search=ef,
                upsert_per_s=len(data) / upsert_s,
                index_build_s=build_s,
                first_query_s=first,
                query_per_s=len(queries) / (lat.sum() / 1000),
                p50_ms=float(np.percentile(lat, 50)),
                p99_ms=float(np.percentile(lat, 99)),
                recall=hits / (TOP_K * len(queries)),
            )
        )
    engine.drop(collection_id=cid)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engines", default="embedded,pgvector")
    parser.add_argument("--ef", default="40,100,200", help="pgvector hnsw.ef_search values")
    parser.add_argument(
        "--data",
        choices=("random", "lowrank"),
        default="random",
        help="i.i.d. Gaussian vectors (no structure: the hardest case for HNSW), or vectors "
        "of a 24-dimensional space mapped into --dims (like real embeddings, whose intrinsic "
        "dimension is far below their length)",
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    from accounts.models import Organization, Project
    from vectors.engines.embedded import EmbeddedStore
    from vectors.engines.pgvector import PgVectorStore
    from vectors.models import Collection

    rng = np.random.default_rng(0)
    if args.data == "random":
        data = rng.standard_normal((args.n, args.dims)).astype(np.float32)
        queries = rng.standard_normal((args.queries, args.dims)).astype(np.float32)
    else:
        basis = rng.standard_normal((24, args.dims))
        latent = rng.standard_normal((args.n + args.queries, 24))
        noise = 0.05 * rng.standard_normal((args.n + args.queries, args.dims))
        mixed = (latent @ basis + noise).astype(np.float32)
        data, queries = mixed[: args.n], mixed[args.n :]
    truth = exact_top_k(data, queries, TOP_K)
    results = []
    for name in args.engines.split(","):
        if name == "embedded":
            call_command("migrate", verbosity=0)
            org = Organization.objects.create(name="bench", slug=f"bench-{os.getpid()}")
            project = Project.objects.create(organization=org, name="bench")
            c = Collection.objects.create(
                organization=org, project=project, public_id=f"vs_bench{os.getpid()}",
                name="bench", engine="embedded", dimensions=args.dims,
            )  # fmt: skip
            try:
                results += run_engine(name, EmbeddedStore(), c.pk, data, queries, truth, [None])
            finally:
                org.delete()
        else:
            with pgvector_url() as url:
                store = PgVectorStore(url=url)
                efs: list[int | None] = [int(e) for e in args.ef.split(",")]
                results += run_engine(name, store, 2**40 + os.getpid(), data, queries, truth, efs)
    print(
        f"{args.n:,} {args.data} vectors × {args.dims} dims, {args.queries} queries, top {TOP_K}\n"
    )
    print(
        "| engine | ef_search | upsert vectors/s | index build s | first query s | queries/s"
        " | p50 ms | p99 ms | recall@10 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        ef = "exact" if r.ef_search is None else str(r.ef_search)
        print(
            f"| {r.engine} | {ef} | {r.upsert_per_s:,.0f} | {r.index_build_s:.1f}"
            f" | {r.first_query_s:.2f}"
            f" | {r.query_per_s:,.1f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.recall:.3f} |"
        )


if __name__ == "__main__":
    main()
