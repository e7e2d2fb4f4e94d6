// Copy buttons and the live websocket. No framework; everything works without JS except the
// live counters and the clipboard.
(function () {
  "use strict";

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy-target"));
    var text = source ? source.textContent.trim() : "";
    var done = function () {
      button.textContent = "Copied";
      var status = document.getElementById("copy-status");
      if (status) status.textContent = "Copied to the clipboard.";
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done);
    } else {
      var area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
      done();
    }
  });

  function addNumber(el, delta) {
    var current = parseInt(el.getAttribute("data-value") || "0", 10);
    var next = current + delta;
    el.setAttribute("data-value", String(next));
    el.textContent = next.toLocaleString("en-US");
  }

  // Integer nano-USD as the server's `usd` filter writes it: cents always, sub-cent digits
  // kept exactly ("$0.000002"), thousands separated.
  function usdText(nanos) {
    var sign = nanos < 0n ? "-" : "";
    if (nanos < 0n) nanos = -nanos;
    var whole = (nanos / 1000000000n).toLocaleString("en-US");
    var frac = (nanos % 1000000000n).toString().padStart(9, "0").replace(/0+$/, "");
    while (frac.length < 2) frac += "0";
    return sign + "$" + whole + "." + frac;
  }

  function addUsd(el, deltaNanos) {
    var next = BigInt(el.getAttribute("data-nanos") || "0") + BigInt(deltaNanos);
    el.setAttribute("data-nanos", next.toString());
    el.textContent = usdText(next);
  }

  // Regions marked data-live-region are re-rendered by the server after an event (one fetch
  // of this page, at most one in flight, coalescing events): what they show is exactly what
  // a reload shows — breakdowns, charts, filters and holds included.
  var refreshing = false;
  var refreshAgain = false;
  async function refreshRegions() {
    if (!document.querySelector("[data-live-region]")) return;
    if (refreshing) { refreshAgain = true; return; }
    refreshing = true;
    try {
      var response = await fetch(location.href, { credentials: "same-origin" });
      if (response.ok && !response.redirected) {
        var fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        document.querySelectorAll("[data-live-region]").forEach(function (el) {
          var name = el.getAttribute("data-live-region");
          var next = fresh.querySelector('[data-live-region="' + name + '"]');
          if (next) el.replaceWith(document.importNode(next, true));
        });
        focusScrollables();
        document.body.setAttribute("data-live-refreshes",
          String(parseInt(document.body.getAttribute("data-live-refreshes") || "0", 10) + 1));
      }
    } catch (err) {
      // best effort: the next event or a reload brings the page up to date
    } finally {
      refreshing = false;
      if (refreshAgain) { refreshAgain = false; refreshRegions(); }
    }
  }

  function onUsage(msg) {
    document.querySelectorAll("[data-live-count=requests]").forEach(function (el) {
      addNumber(el, 1);
    });
    document.querySelectorAll("[data-live-count=tokens]").forEach(function (el) {
      addNumber(el, msg.input_tokens + msg.output_tokens);
    });
    document.querySelectorAll("[data-live-cost]").forEach(function (el) {
      addUsd(el, msg.cost_nanos);
    });
    var table = document.querySelector("[data-live-log]");
    if (table) {
      var empty = document.querySelector("[data-live-empty]");
      if (empty) empty.hidden = true;
      table.hidden = false;
      var row = document.createElement("tr");
      row.className = "flash";
      var base = table.getAttribute("data-detail-base") || "";
      var cells = [
        "just now", msg.model, msg.vendor, msg.status,
        String(msg.input_tokens + msg.output_tokens), msg.cost_display, msg.latency_ms + " ms",
      ];
      cells.forEach(function (text, i) {
        var td = document.createElement("td");
        if (i === 0) {
          var a = document.createElement("a");
          a.href = base + encodeURIComponent(msg.request_id) + "/";
          a.textContent = text;
          td.appendChild(a);
        } else {
          td.textContent = text;
        }
        if (i >= 4) td.className = "num";
        row.appendChild(td);
      });
      row.setAttribute("data-request-id", msg.request_id);
      table.querySelector("tbody").prepend(row);
    }
  }

  function onBalance(msg) {
    document.querySelectorAll("[data-live-balance]").forEach(function (el) {
      el.textContent = msg.balance_display;
    });
    document.querySelectorAll("[data-live-available]").forEach(function (el) {
      el.textContent = msg.available_display;
    });
    document.querySelectorAll("[data-live-held]").forEach(function (el) {
      el.textContent = msg.held_display;
    });
  }

  function connect(slug, attempt) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/o/" + slug + "/live/");
    var dot = document.getElementById("live-dot");
    socket.onopen = function () {
      attempt = 0;
      if (dot) { dot.classList.add("on"); dot.title = "Live updates on"; }
      document.body.setAttribute("data-live", "on");
    };
    socket.onmessage = function (event) {
      var msg = JSON.parse(event.data);
      if (msg.kind === "usage") onUsage(msg);
      if (msg.kind === "balance") onBalance(msg);
      if (msg.kind === "usage" || msg.kind === "balance" || msg.kind === "resync") {
        refreshRegions();
      }
    };
    socket.onclose = function (event) {
      document.body.setAttribute("data-live", "off");
      if (dot) { dot.classList.remove("on"); dot.title = "Live updates off"; }
      if (event.code === 4403) return;
      setTimeout(function () { connect(slug, attempt + 1); }, Math.min(30000, 1000 * 2 ** attempt));
    };
  }

  // A box that scrolls inside the page (a wide table on a phone, a long code block) must be
  // reachable with the keyboard to be scrolled: while it scrolls it is a tab stop (marked
  // data-scroll-focus), and it stops being one when a wider window lets it fit again.
  function focusScrollables() {
    document.querySelectorAll("main table, main pre, main .table-scroll").forEach(function (el) {
      var style = getComputedStyle(el);
      var scrolls = (/(auto|scroll)/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1) ||
        (/(auto|scroll)/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1);
      if (scrolls && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        el.setAttribute("data-scroll-focus", "");
      } else if (!scrolls && el.hasAttribute("data-scroll-focus")) {
        el.removeAttribute("tabindex");
        el.removeAttribute("data-scroll-focus");
      }
    });
  }
  window.infraiFocusScrollables = focusScrollables;  // the playground calls it after rendering
  focusScrollables();
  window.addEventListener("resize", focusScrollables);
  document.addEventListener("toggle", focusScrollables, true);  // <details> opening

  var slug = document.body.getAttribute("data-org");
  if (slug && "WebSocket" in window) connect(slug, 0);
})();
