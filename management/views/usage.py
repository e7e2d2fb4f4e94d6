"""Usage, costs and the request log: ``/v1/organization/usage/completions``, ``/costs``,
``/requests``.

Usage and costs follow OpenAI's Usage API: a ``page`` of time ``bucket`` objects between
``start_time`` and ``end_time`` (unix seconds), ``bucket_width`` ``1d`` (at most 31 buckets a
page, 7 by default) or ``1h`` (168, 24 by default), ``group_by`` any of ``project_id``,
``api_key_id``, ``model``; ``next_page`` is the ``page`` value of the next page. Every call,
failed ones included, is one request; day buckets are read from the daily rollups, partial days
and hour buckets from the request log (:func:`management.selectors.usage_groups`). Beside
OpenAI's fields a usage result has ``input_cache_write_tokens`` and ``output_reasoning_tokens``
(infrai's extensions: prompt-cache writes and hidden reasoning, parts of ``input_tokens`` and
``output_tokens``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q
from rest_framework.request import Request
from rest_framework.response import Response

from config.errors import InvalidRequest, NotFound
from inference import selectors as inference_selectors
from inference.models import RequestLog, RequestStatus
from management import render
from management.api import DEFAULT_LIMIT, MAX_LIMIT, ManagementView, int_param, list_response
from management.selectors import GROUP_FIELDS, WIDTH, BucketWidth, UsageGroup, align, usage_groups
from money.usd import nanos_to_usd_str

_BUCKETS = {"1d": (7, 31), "1h": (24, 168)}
_MAX_TS = 253402300799


def _time(request: Request, name: str, *, required: bool = False) -> datetime | None:
    value = int_param(request, name, lo=0, hi=_MAX_TS)
    if value is None:
        if required:
            raise InvalidRequest(
                f"Missing required parameter: '{name}'.",
                param=name,
                code="missing_required_parameter",
            )
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def _group_by(request: Request) -> list[str]:
    values = request.query_params.getlist("group_by") + request.query_params.getlist("group_by[]")
    out: list[str] = []
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            if item not in GROUP_FIELDS:
                raise InvalidRequest(
                    f"Invalid 'group_by': {item!r}; use project_id, api_key_id or model.",
                    param="group_by",
                )
            if item not in out:
                out.append(item)
    return out


def _group_json(group: dict[str, Any], group_by: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("project_id", "api_key_id", "model"):
        value = group.get(name) if name in group_by else None
        if value is not None and name == "project_id":
            value = f"proj_{value}"
        elif value is not None and name == "api_key_id":
            value = f"key_{value}"
        out[name] = value
    return out


def _usage_result(g: UsageGroup, group_by: list[str]) -> dict[str, Any]:
    return {
        "object": "organization.usage.completions.result",
        "num_model_requests": g.requests,
        "input_tokens": g.input_tokens,
        "input_cached_tokens": g.cached_input_tokens,
        "input_cache_write_tokens": g.cache_write_tokens,  # infrai's extension
        "output_tokens": g.output_tokens,
        "output_reasoning_tokens": g.reasoning_tokens,  # infrai's extension
        "cost_usd": nanos_to_usd_str(g.cost_nanos),
        **_group_json(g.group, group_by),
    }


def _cost_result(g: UsageGroup, group_by: list[str]) -> dict[str, Any]:
    return {
        "object": "organization.costs.result",
        "amount": {"value": nanos_to_usd_str(g.cost_nanos), "currency": "usd"},
        "line_item": None,
        **_group_json(g.group, group_by),
    }


def _bucket_page(
    request: Request, result: Callable[[UsageGroup, list[str]], dict[str, Any]]
) -> Response:
    width_raw = request.query_params.get("bucket_width", "1d")
    if width_raw not in WIDTH:
        raise InvalidRequest("Invalid 'bucket_width': use 1d or 1h.", param="bucket_width")
    width: BucketWidth = "1d" if width_raw == "1d" else "1h"
    default, most = _BUCKETS[width]
    limit = int_param(request, "limit", default=default, lo=1, hi=most)
    assert limit is not None
    start = _time(request, "start_time", required=True)
    assert start is not None
    end = _time(request, "end_time") or datetime.now(tz=UTC)
    page_start = _time(request, "page")
    lo = align(max(start, page_start or start), width)
    if end <= lo:
        raise InvalidRequest("'end_time' must be after 'start_time'.", param="end_time")
    step = WIDTH[width]
    hi = min(end, lo + step * limit)
    group_by = _group_by(request)
    groups = usage_groups(
        organization_id=request.auth.organization.pk,  # type: ignore[union-attr]
        start=max(start, lo),
        end=hi,
        width=width,
        group_by=group_by,
    )
    by_bucket: dict[datetime, list[UsageGroup]] = defaultdict(list)
    for g in groups:
        by_bucket[g.bucket_start].append(g)
    data = []
    bucket = lo
    while bucket < hi:
        data.append(
            {
                "object": "bucket",
                "start_time": int(bucket.timestamp()),
                "end_time": int((bucket + step).timestamp()),
                "results": [result(g, group_by) for g in by_bucket.get(bucket, [])],
            }
        )
        bucket += step
    has_more = hi < end
    return Response(
        {
            "object": "page",
            "data": data,
            "has_more": has_more,
            "next_page": str(int(hi.timestamp())) if has_more else None,
        }
    )


class UsageCompletions(ManagementView):
    def get(self, request: Request) -> Response:
        return _bucket_page(request, _usage_result)


class Costs(ManagementView):
    def get(self, request: Request) -> Response:
        return _bucket_page(request, _cost_result)


class RequestList(ManagementView):
    def get(self, request: Request) -> Response:
        """The request log, newest first; filters ``status``, ``model``, ``project_id``,
        ``start_time``/``end_time``; cursor ``after`` (a request id) and ``limit``.

        Ordered by ``(created_at, id)``, the log's partition key first: PostgreSQL reads the
        monthly partitions newest first through their ``(organization_id, created_at)`` index
        and stops at the page's end, where an order by id alone would merge every partition."""
        limit = int_param(request, "limit", default=DEFAULT_LIMIT, lo=1, hi=MAX_LIMIT)
        assert limit is not None
        org_id = self.ctx.organization.pk
        qs = RequestLog.objects.filter(organization_id=org_id)
        params = request.query_params
        if status := params.get("status"):
            if status not in RequestStatus.values:
                raise InvalidRequest(
                    f"Invalid 'status': use one of {', '.join(RequestStatus.values)}.",
                    param="status",
                )
            qs = qs.filter(status=status)
        if model := params.get("model"):
            qs = qs.filter(model=model)
        if start := _time(request, "start_time"):
            qs = qs.filter(created_at__gte=start)
        if end := _time(request, "end_time"):
            qs = qs.filter(created_at__lt=end)
        if after := params.get("after"):
            cursor = (
                RequestLog.objects.filter(organization_id=org_id, request_id=after)
                .values_list("created_at", "pk")
                .first()
            )
            if cursor is None:
                raise InvalidRequest("Invalid 'after': no such request.", param="after")
            at, pk = cursor
            qs = qs.filter(Q(created_at__lt=at) | Q(created_at=at, pk__lt=pk))
        rows = list(qs.order_by("-created_at", "-pk")[: limit + 1])
        return list_response(
            [render.request_row(r) for r in rows[:limit]], has_more=len(rows) > limit
        )


class RequestDetail(ManagementView):
    def get(self, request: Request, request_id: str) -> Response:
        row = inference_selectors.request_log_get(
            organization_id=self.ctx.organization.pk, request_id=request_id
        )
        if row is None:
            raise NotFound("No such request.")
        return Response(render.request_row(row))
