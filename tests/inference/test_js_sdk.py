"""The official JavaScript SDK (the ``openai`` npm package) against the live app.

``tests/js/sdk_check.mjs`` streams a chat completion (fake vendor), embeds with the real MiniLM
model and synthesizes speech with the real piper voice; this test checks what it printed
against the ledger. ``npm ci`` installs the package from the lockfile once per session when
``tests/js/node_modules`` is missing (``scripts/install.sh`` does the same).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from money.pricing import Usage
from tests.inference.conftest import assert_billed

JS_DIR = Path(__file__).resolve().parents[1] / "js"
pytestmark = pytest.mark.usefixtures("gateway_catalog")


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable, with the lockfile's packages installed."""
    executable = shutil.which("node")
    npm = shutil.which("npm")
    if executable is None or npm is None:
        pytest.skip("node/npm are not installed")
    if not (JS_DIR / "node_modules" / "openai").is_dir():
        subprocess.run(
            [npm, "ci", "--silent", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=300
        )
    return executable


def test_the_javascript_sdk_streams_chat_embeds_and_speaks(node, issue_key, api_base):
    env = {
        **os.environ,
        "INFRAI_BASE_URL": api_base,
        "INFRAI_API_KEY": issue_key(),
        "INFRAI_CHAT_MODEL": "test-large",
        "INFRAI_EMBED_MODEL": "all-MiniLM-L6-v2",
        "INFRAI_SPEECH_MODEL": "piper-en-us-joe",
    }
    done = subprocess.run(
        [node, str(JS_DIR / "sdk_check.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])

    chat = out["chat"]
    assert chat["text"] == "Echo: hello from node" and chat["chunks"] >= 5
    assert chat["infrai"]["vendor"] == "primary"
    assert_billed(
        chat["infrai"]["request_id"],
        model="test-large",
        vendor="primary",
        usage=Usage(
            input_tokens=chat["usage"]["prompt_tokens"],
            output_tokens=chat["usage"]["completion_tokens"],
        ),
    )

    # The spec's loop without guards: no empty-choices chunk when usage was not asked for.
    assert out["specLoop"]["text"] == "Echo: Write a haiku about smart routing."

    embeddings = out["embeddings"]
    assert embeddings["model"] == "all-MiniLM-L6-v2" and embeddings["dimensions"] == 384
    assert embeddings["cosine"] > 0.5  # real sentence embeddings: cat ~ kitten
    assert_billed(
        embeddings["infrai"]["request_id"],
        model="all-MiniLM-L6-v2",
        vendor="infrai-gpu",
        usage=Usage(input_tokens=embeddings["usage"]["prompt_tokens"]),
    )

    speech = out["speech"]
    assert speech["riff"] == "RIFF" and speech["bytes"] > 10_000
    assert speech["contentType"] == "audio/wav" and speech["vendor"] == "infrai-gpu"
    cost = assert_billed(
        speech["requestId"],
        model="piper-en-us-joe",
        vendor="infrai-gpu",
        usage=Usage(characters=len("Hello from node.")),
    )
    assert speech["costUsd"] == f"{cost / 1e9:.9f}".rstrip("0")
