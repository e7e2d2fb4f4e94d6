// The official `openai` npm package against the live app: chat (streamed), embeddings, speech.
// Run by tests/inference/test_js_sdk.py with INFRAI_BASE_URL, INFRAI_API_KEY and the models in
// the environment; prints one JSON object with what each call returned.
import OpenAI from "openai";

const env = process.env;
const client = new OpenAI({ baseURL: env.INFRAI_BASE_URL, apiKey: env.INFRAI_API_KEY, maxRetries: 0 });

async function chat() {
  const stream = await client.chat.completions.create({
    model: env.INFRAI_CHAT_MODEL,
    messages: [{ role: "user", content: "hello from node" }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let chunks = 0;
  let last = null;
  for await (const chunk of stream) {
    chunks += 1;
    text += chunk.choices[0]?.delta?.content ?? "";
    last = chunk;
  }
  return { text, chunks, usage: last.usage, infrai: last.infrai };
}

// The spec's streaming loop as JavaScript users write it: chunk.choices[0].delta, no guards.
async function specLoop() {
  const stream = await client.chat.completions.create({
    model: env.INFRAI_CHAT_MODEL,
    messages: [{ role: "user", content: "Write a haiku about smart routing." }],
    stream: true,
  });
  let text = "";
  for await (const chunk of stream) {
    text += chunk.choices[0].delta.content || "";
  }
  return { text };
}

async function embeddings() {
  const resp = await client.embeddings.create({ model: env.INFRAI_EMBED_MODEL, input: ["a cat", "a kitten"] });
  const [a, b] = resp.data.map((d) => d.embedding);
  const cosine = a.reduce((sum, v, i) => sum + v * b[i], 0);
  return { model: resp.model, dimensions: a.length, cosine, usage: resp.usage, infrai: resp.infrai };
}

async function speech() {
  const { data, response } = await client.audio.speech
    .create({ model: env.INFRAI_SPEECH_MODEL, voice: "alloy", input: "Hello from node.", response_format: "wav" })
    .withResponse();
  const bytes = Buffer.from(await data.arrayBuffer());
  return {
    bytes: bytes.length,
    riff: bytes.subarray(0, 4).toString("latin1"),
    contentType: response.headers.get("content-type"),
    requestId: response.headers.get("x-infrai-request-id"),
    vendor: response.headers.get("x-infrai-vendor"),
    costUsd: response.headers.get("x-infrai-cost-usd"),
  };
}

console.log(
  JSON.stringify({
    chat: await chat(),
    specLoop: await specLoop(),
    embeddings: await embeddings(),
    speech: await speech(),
  }),
);
