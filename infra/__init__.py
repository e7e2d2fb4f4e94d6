"""The platform's clients of its infrastructure: PostgreSQL from the hot path (:mod:`infra.adb`)
and from async code (:mod:`infra.db`), Redis (:mod:`infra.resp`, and the cache over it,
:mod:`infra.fastcache`) and the live pushes to dashboards (:mod:`infra.live`). Above
:mod:`config` (settings, errors, outages) and below every app."""
