"""What the dashboard and the management API read about calls (inference.selectors)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from inference.models import RequestLog, RequestStatus
from inference.selectors import LogFilters, request_log

pytestmark = pytest.mark.django_db


def test_request_log_pages_follow_time_order_even_when_ids_do_not():
    """A row is written when its call ends: a long call started earlier gets a later id.
    Paging must neither skip nor repeat a row when id order and time order disagree."""
    now = timezone.now().replace(microsecond=0)
    # ids ascend in this order, times do not (and two rows share one time)
    offsets = [5, 1, 9, 3, 3, 7, 0, 8]
    for i, seconds in enumerate(offsets):
        RequestLog.objects.create(
            request_id=f"req_page_{i}",
            organization_id=1,
            endpoint="chat.completions",
            status=RequestStatus.OK,
            http_status=200,
            created_at=now - dt.timedelta(seconds=seconds),
        )
    RequestLog.objects.create(  # another tenant's row in the same range is never listed
        request_id="req_page_other",
        organization_id=2,
        endpoint="chat.completions",
        status=RequestStatus.OK,
        http_status=200,
        created_at=now,
    )
    seen: list[RequestLog] = []
    before: int | None = None
    while True:
        page = request_log(
            organization_id=1,
            start=now - dt.timedelta(hours=1),
            end=now + dt.timedelta(hours=1),
            filters=LogFilters(),
            before_id=before,
            limit=3,
        )
        if not page:
            break
        seen.extend(page)
        before = page[-1].id
    assert len(seen) == len(offsets)
    assert len({row.id for row in seen}) == len(offsets)
    keys = [(row.created_at, row.id) for row in seen]
    assert keys == sorted(keys, reverse=True)
