import httpx
import openai
import pytest


@pytest.mark.django_db(transaction=True)
def test_models_list_with_sdk(api_base, issue_key):
    key = issue_key()
    client = openai.OpenAI(base_url=api_base, api_key=key, max_retries=0)
    page = client.models.list()
    assert page.object == "list"
    r = httpx.get(api_base + "/models", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200
    assert r.headers["x-infrai-request-id"].startswith("req_")
