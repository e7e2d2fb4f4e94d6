"""Image generation end to end: the official SDK → live app → fake image vendors, billed per
image by size and quality; URLs the caller can fetch."""

from __future__ import annotations

import base64

import httpx
import openai
import pytest

from billing.models import Hold
from catalog.documents import catalog_load
from money.pricing import Usage
from tests.inference.conftest import assert_400_before_any_hold, assert_billed

pytestmark = pytest.mark.usefixtures("gateway_catalog")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def public_base(settings, api_base: str) -> str:
    """The app's public ``/v1`` URL, as signed image URLs are built on it."""
    settings.INFRAI_PUBLIC_BASE_URL = api_base
    return api_base


def test_vendor_urls_are_passed_through_and_billed_per_image(issue_key, client_for, fakes):
    raw = client_for(issue_key()).images.with_raw_response.generate(
        model="test-image", prompt="a red panda coding", n=2, size="1024x1024"
    )
    resp = raw.parse()
    assert len(resp.data) == 2 and all(d.url.startswith(fakes["primary"].url) for d in resp.data)
    assert all(httpx.get(d.url).content.startswith(PNG) for d in resp.data)
    infrai = resp.model_extra["infrai"]
    assert infrai["vendor"] == "primary" and raw.headers["x-infrai-vendor"] == "primary"
    cost = assert_billed(
        infrai["request_id"],
        model="test-image",
        vendor="primary",
        usage=Usage(images={"1024x1024/standard": 2}),
    )
    assert cost == 80_000_000 == infrai["cost_nanos"]  # 2 x $0.04
    assert fakes["primary"].requests[-1]["model"] == "up-large"


def test_b64_only_vendor_gets_a_short_lived_signed_url_served_by_us(
    issue_key, client_for, fakes, public_base
):
    fakes["primary"].images_b64_only = True
    resp = client_for(issue_key()).images.generate(
        model="test-image", prompt="a lighthouse", response_format="url"
    )
    url = resp.data[0].url
    assert url.startswith(public_base + "/files/images/")
    fetched = httpx.get(url)  # no key: the signed token is the credential
    assert fetched.status_code == 200 and fetched.headers["content-type"] == "image/png"
    assert fetched.content.startswith(PNG)
    forged = httpx.get(url[:-3] + ("xyz" if not url.endswith("xyz") else "abc"))
    assert forged.status_code == 404 and forged.json()["error"]["code"] == "not_found"


def test_expired_image_urls_are_404(issue_key, client_for, fakes, public_base, settings):
    fakes["primary"].images_b64_only = True
    url = client_for(issue_key()).images.generate(model="test-image", prompt="x").data[0].url
    settings.INFRAI_IMAGE_URL_TTL_S = -1
    assert httpx.get(url).status_code == 404


def test_b64_json_hd_is_priced_by_quality_and_sizes_fall_back(issue_key, client_for):
    client = client_for(issue_key())
    hd = client.images.generate(
        model="test-image", prompt="a cat", quality="hd", response_format="b64_json"
    )
    wide = client.images.generate(
        model="test-image", prompt="a cat", size="1792x1024", response_format="b64_json"
    )
    assert base64.b64decode(hd.data[0].b64_json).startswith(PNG)
    assert hd.model_extra["infrai"]["cost_nanos"] == 80_000_000  # $0.08 hd
    assert wide.model_extra["infrai"]["cost_nanos"] == 100_000_000  # "*" entry: $0.10
    assert_billed(
        wide.model_extra["infrai"]["request_id"],
        model="test-image",
        vendor="primary",
        usage=Usage(images={"1792x1024/standard": 1}),
    )


def test_a_vendor_url_asked_as_b64_json_is_fetched(issue_key, api_base, fakes):
    fakes["primary"].images_b64_only = False
    response = httpx.post(
        f"{api_base}/images/generations",
        json={"model": "test-image", "prompt": "x", "response_format": "b64_json"},
        headers={"authorization": f"Bearer {issue_key()}"},
    )
    item = response.json()["data"][0]
    assert base64.b64decode(item["b64_json"]).startswith(PNG)


def test_failover_serves_from_the_backup(issue_key, client_for, fakes):
    fakes["primary"].fail_statuses = [500]
    resp = client_for(issue_key()).images.generate(model="test-image", prompt="failover")
    infrai = resp.model_extra["infrai"]
    assert (infrai["vendor"], infrai["failovers"]) == ("backup", 1)
    assert_billed(
        infrai["request_id"],
        model="test-image",
        vendor="backup",
        usage=Usage(images={"1024x1024/standard": 1}),
    )


def test_no_routable_image_offering_is_a_clear_503(issue_key, client_for):
    catalog_load(
        {"vendors": [{"name": "primary", "enabled": False}, {"name": "backup", "enabled": False}]}
    )
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(issue_key()).images.generate(model="auto", prompt="x")
    assert caught.value.status_code == 503
    assert caught.value.body["code"] == "no_routable_offering"
    assert "images" in caught.value.body["message"]
    assert not Hold.objects.exists()


@pytest.mark.parametrize(
    ("body", "param"),
    [({"model": "test-image"}, "prompt"), ({"prompt": "x", "n": 11}, "n"),
     ({"prompt": "x", "size": "999x999"}, "size"),
     ({"prompt": "x", "response_format": "png"}, "response_format"),
     ({"prompt": "x", "model": "all-MiniLM-L6-v2"}, "model")],
)  # fmt: skip
def test_bad_requests_are_400_before_any_hold(issue_key, api_base, fakes, body, param):
    assert_400_before_any_hold(api_base, issue_key(), "images/generations", body, param)
    assert not fakes["primary"].requests
