"""A fake OpenAI-compatible upstream that costs almost nothing, for benchmarks.

Raw asyncio HTTP/1.1 with keep-alive (uvloop when installed), answers built once at start:

- ``POST /v1/chat/completions``: a fixed completion; with ``"stream": true`` an SSE stream of
  ``max_tokens`` content chunks (one token each), a finish chunk, a usage chunk when
  ``stream_options.include_usage`` is set, then ``[DONE]`` — each chunk its own write;
- ``POST /v1/embeddings``: one vector of ``--dimensions`` floats per input (1,536 by default);
- ``GET /v1/models``;
- a stream for the model ``bench-idle-up`` sends its first chunk, then idles for two minutes
  (memory per idle open stream).

Only for loopback benchmarks: no TLS, no auth, bodies up to 1 MiB.

    python bench/upstream.py --port 9100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random

MAX_BODY = 1 << 20
MAX_CHUNKS = 4096
COMPLETION_TOKENS = 16
# A stream of this model sends its first chunk, then nothing for IDLE_S seconds (idle streams).
IDLE_MODEL = "bench-idle-up"
IDLE_S = 120.0
TOKEN_KINDS = 7


def _response(body: bytes, status: str = "200 OK", ctype: bytes = b"application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: {ctype.decode()}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def _json(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Answers:
    """Every answer, encoded once."""

    def __init__(self, dimensions: int) -> None:
        rng = random.Random(7)
        self.chat = _response(
            _json(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": 1_700_000_000,
                    "model": "bench-up",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "tok " * 16},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 10,
                        "completion_tokens": COMPLETION_TOKENS,
                        "total_tokens": 10 + COMPLETION_TOKENS,
                    },
                }
            )
        )
        vector = [round(rng.uniform(-1, 1), 8) for _ in range(dimensions)]
        self.embedding_item = {"object": "embedding", "index": 0, "embedding": vector}
        self.embeddings_one = self.embeddings(1)
        self.models = _response(
            _json(
                {
                    "object": "list",
                    "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "bench"}
                        for m in ("bench-up", "bench-embed-up")
                    ],
                }
            )
        )
        self.not_found = _response(b'{"error":{"message":"not found"}}', "404 Not Found")
        self.stream_head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        base = '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
        base += '"model":"bench-up","choices":[{"index":0,"delta":'
        role = '{"role":"assistant","content":""}'
        self.first_chunk = _chunk(f'data: {base}{role},"finish_reason":null}}]}}\n\n'.encode())
        # Distinct tokens: LiteLLM refuses a stream that repeats one chunk too often.
        self.token_chunks = [
            _chunk(f'data: {base}{{"content":"t{i} "}},"finish_reason":null}}]}}\n\n'.encode())
            for i in range(TOKEN_KINDS)
        ]
        self.finish_chunk = _chunk(f'data: {base}{{}},"finish_reason":"stop"}}]}}\n\n'.encode())
        self.done = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    def embeddings(self, count: int) -> bytes:
        data = [{**self.embedding_item, "index": i} for i in range(count)]
        return _response(
            _json(
                {
                    "object": "list",
                    "data": data,
                    "model": "bench-embed-up",
                    "usage": {"prompt_tokens": 4 * count, "total_tokens": 4 * count},
                }
            )
        )

    def usage_chunk(self, tokens: int) -> bytes:
        usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "bench-up",
            "choices": [],
            "usage": usage,
        }
        return _chunk(b"data: " + _json(body) + b"\n\n")


async def _stream(writer: asyncio.StreamWriter, answers: Answers, request: dict) -> None:
    count = min(max(int(request.get("max_tokens") or COMPLETION_TOKENS), 1), MAX_CHUNKS)
    writer.write(answers.stream_head + answers.first_chunk)
    if request.get("model") == IDLE_MODEL:  # an open stream that sends nothing more for a while
        await writer.drain()
        await asyncio.sleep(IDLE_S)
    for i in range(count):
        writer.write(answers.token_chunks[i % TOKEN_KINDS])
        if i % 16 == 15:
            await writer.drain()
    writer.write(answers.finish_chunk)
    if (request.get("stream_options") or {}).get("include_usage"):
        writer.write(answers.usage_chunk(count))
    writer.write(answers.done)
    await writer.drain()


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: Answers
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length > MAX_BODY:
                return
            body = await reader.readexactly(length) if length else b""
            path = path.split("?", 1)[0]
            if method == "POST" and path.endswith("/chat/completions"):
                request = json.loads(body or b"{}")
                if request.get("stream"):
                    await _stream(writer, answers, request)
                    continue
                writer.write(answers.chat)
            elif method == "POST" and path.endswith("/embeddings"):
                inputs = json.loads(body or b"{}").get("input")
                count = len(inputs) if isinstance(inputs, list) and inputs else 1
                if count > 1 and not isinstance(inputs[0], int):
                    writer.write(answers.embeddings(min(count, 2048)))
                else:
                    writer.write(answers.embeddings_one)
            elif method == "GET" and path.endswith("/models"):
                writer.write(answers.models)
            else:
                writer.write(answers.not_found)
            await writer.drain()
    except (ConnectionError, ValueError):
        return
    finally:
        writer.close()


async def serve(port: int, dimensions: int) -> None:
    answers = Answers(dimensions)
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, answers), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dimensions", type=int, default=1536)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port, args.dimensions))
    else:
        uvloop.run(serve(args.port, args.dimensions))


if __name__ == "__main__":
    main()
