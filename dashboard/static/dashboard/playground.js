// The playground: a multi-turn chat over /v1/chat/completions with the page's playground key,
// streamed (Server-Sent Events). "View code" always shows the exact request the next Send
// makes (the conversation so far plus the message), as Python (openai SDK) and curl.
(function () {
  "use strict";
  var form = document.getElementById("chat-form");
  if (!form) return;
  var key = form.getAttribute("data-key");
  var baseUrl = form.getAttribute("data-base-url") || (location.origin + "/v1");
  var conversation = document.getElementById("conversation");
  var meta = document.getElementById("answer-meta");
  var send = document.getElementById("send");
  var prompt = document.getElementById("pg-prompt");
  var history = [];  // {role, content} of the finished turns

  function field(id) { return document.getElementById(id); }

  // The request body the next Send posts (without the streaming options the page adds).
  function requestBody(message) {
    var messages = [];
    var system = field("pg-system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages = messages.concat(history);
    // An empty box is no turn (Send needs a message): the code then shows the conversation.
    if (message !== "") messages.push({ role: "user", content: message });
    var body = { model: field("pg-model").value || "auto", messages: messages };
    var temperature = field("pg-temperature").value.trim();
    if (temperature !== "") body.temperature = Number(temperature);
    var maxTokens = field("pg-max-tokens").value.trim();
    if (maxTokens !== "") body.max_tokens = parseInt(maxTokens, 10);
    return body;
  }

  function pyValue(value, indent) {
    // JSON is valid Python for strings, numbers and lists/dicts of them, except the literals.
    return JSON.stringify(value, null, 4).split("\n").join("\n" + indent)
      .replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False").replace(/\bnull\b/g, "None");
  }

  function pythonSnippet(body) {
    var lines = [
      "import os", "", "from openai import OpenAI", "",
      "client = OpenAI(base_url=" + JSON.stringify(baseUrl) + ", api_key=os.environ[\"INFRAI_API_KEY\"])",
      "response = client.chat.completions.create(",
    ];
    Object.keys(body).forEach(function (name) {
      lines.push("    " + name + "=" + pyValue(body[name], "    ") + ",");
    });
    lines.push(")", "print(response.choices[0].message.content)");
    return lines.join("\n");
  }

  function curlSnippet(body) {
    var json = JSON.stringify(body, null, 2).replace(/'/g, "'\\''");
    return "curl " + baseUrl + "/chat/completions \\\n" +
      "  -H \"Authorization: Bearer $INFRAI_API_KEY\" \\\n" +
      "  -H \"Content-Type: application/json\" \\\n" +
      "  -d '" + json + "'";
  }

  function showCode() {
    var body = requestBody(prompt.value);
    field("pg-code-python").textContent = pythonSnippet(body);
    field("pg-code-curl").textContent = curlSnippet(body);
    if (window.infraiFocusScrollables) window.infraiFocusScrollables();
  }

  function addTurn(role, text) {
    var item = document.createElement("li");
    item.className = role;
    item.setAttribute("data-role", role);
    var who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Assistant";
    var content = document.createElement("span");
    content.className = "content";
    content.textContent = text;
    item.appendChild(who);
    item.appendChild(content);
    conversation.appendChild(item);
    return content;
  }

  function showMeta(infrai, headers) {
    var cost = infrai && infrai.cost_usd !== undefined ? infrai.cost_usd : headers.get("x-infrai-cost-usd");
    var vendor = (infrai && infrai.vendor) || headers.get("x-infrai-vendor") || "?";
    var model = (infrai && infrai.model) || "";
    meta.textContent = "Cost $" + (cost === null || cost === undefined ? "?" : cost) +
      " · vendor " + vendor + (model ? " · model " + model : "");
  }

  async function stream(response, answer) {
    var infrai = null;
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      var events = buffer.split("\n\n");
      buffer = events.pop();
      events.forEach(function (raw) {
        raw.split("\n").forEach(function (line) {
          if (!line.startsWith("data: ")) return;
          var data = line.slice(6);
          if (data === "[DONE]") return;
          var parsed = JSON.parse(data);
          if (parsed.error) { meta.textContent = "Error: " + parsed.error.message; return; }
          (parsed.choices || []).forEach(function (choice) {
            if (choice.delta && choice.delta.content) answer.textContent += choice.delta.content;
          });
          if (parsed.infrai) infrai = parsed.infrai;
        });
      });
    }
    return infrai;
  }

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    var message = prompt.value;
    var body = requestBody(message);
    meta.textContent = "Waiting for the first token…";
    send.disabled = true;
    addTurn("user", message);
    // The box empties when the message is sent, as in any chat: whatever is typed while the
    // answer streams is the next message and is never touched (nor shown in the code of this
    // turn). Only a refused message comes back, into a box still left empty.
    prompt.value = "";
    showCode();
    function giveBack() { if (prompt.value === "") prompt.value = message; }
    try {
      var response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: { "Authorization": "Bearer " + key, "Content-Type": "application/json" },
        body: JSON.stringify(Object.assign({}, body, {
          stream: true, stream_options: { include_usage: true },
        })),
      });
      if (!response.ok) {
        conversation.lastChild.remove();
        giveBack();
        var error = (await response.json().catch(function () { return {}; })).error || {};
        meta.textContent = "Error " + response.status + ": " + (error.message || response.statusText);
        return;
      }
      var answer = addTurn("assistant", "");
      var infrai = await stream(response, answer);
      history.push({ role: "user", content: message });
      history.push({ role: "assistant", content: answer.textContent });
      showMeta(infrai, response.headers);
    } catch (err) {
      giveBack();
      meta.textContent = "The request failed: " + err;
    } finally {
      send.disabled = false;
      showCode();
    }
  });

  field("pg-reset").addEventListener("click", function () {
    history = [];
    conversation.textContent = "";
    meta.textContent = "";
    showCode();
  });

  ["pg-model", "pg-system", "pg-temperature", "pg-max-tokens", "pg-prompt"].forEach(function (id) {
    field(id).addEventListener("input", showCode);
    field(id).addEventListener("change", showCode);
  });
  showCode();
})();
