// The playground calls /v1/chat/completions with the page's short-lived key and streams the
// answer (Server-Sent Events), then shows the cost and vendor from the final `infrai` object.
(function () {
  "use strict";
  var form = document.getElementById("chat-form");
  if (!form) return;
  var key = form.getAttribute("data-key");
  var answer = document.getElementById("answer");
  var meta = document.getElementById("answer-meta");
  var send = document.getElementById("send");

  function showMeta(infrai, headers) {
    var cost = infrai && infrai.cost_usd !== undefined ? infrai.cost_usd : headers.get("x-infrai-cost-usd");
    var vendor = (infrai && infrai.vendor) || headers.get("x-infrai-vendor") || "?";
    var model = (infrai && infrai.model) || "";
    meta.textContent = "Cost $" + (cost === null || cost === undefined ? "?" : cost) +
      " · vendor " + vendor + (model ? " · model " + model : "");
  }

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    var model = document.getElementById("pg-model").value || "auto";
    var prompt = document.getElementById("pg-prompt").value;
    answer.textContent = "";
    meta.textContent = "Waiting for the first token…";
    send.disabled = true;
    var infrai = null;
    try {
      var response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: { "Authorization": "Bearer " + key, "Content-Type": "application/json" },
        body: JSON.stringify({
          model: model, stream: true, stream_options: { include_usage: true },
          messages: [{ role: "user", content: prompt }],
        }),
      });
      if (!response.ok) {
        var body = await response.json().catch(function () { return {}; });
        var error = body.error || {};
        meta.textContent = "Error " + response.status + ": " + (error.message || response.statusText);
        return;
      }
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
      showMeta(infrai, response.headers);
    } catch (err) {
      meta.textContent = "The request failed: " + err;
    } finally {
      send.disabled = false;
    }
  });
})();
