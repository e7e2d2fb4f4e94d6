// The API reference page: Redoc (drf-spectacular-sidecar's copy, served by us) renders the
// OpenAPI document named by the container's data-spec-url inside the dashboard's main column.
(function () {
  "use strict";
  var container = document.getElementById("api-reference");
  if (!container || !window.Redoc) return;
  var options = {
    hideDownloadButton: false,
    expandResponses: "200",
    pathInMiddlePanel: true,
    nativeScrollbars: true,
    disableSearch: false,
    theme: {
      typography: { fontFamily: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
                    headings: { fontFamily: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif" } },
    },
  };
  // Redoc names each menu entry by the operation's summary alone (aria-label) while it shows
  // the HTTP method too: the visible text must be part of the name (WCAG 2.5.3), so the entry
  // is named by what it shows. Redoc re-renders its menu while scrolling: watched, not once.
  function nameMenuByContent(root) {
    root.querySelectorAll("[role=menuitem][aria-label]").forEach(function (item) {
      item.removeAttribute("aria-label");
    });
  }
  new MutationObserver(function () { nameMenuByContent(container); })
    .observe(container, { subtree: true, childList: true, attributes: true,
                          attributeFilter: ["aria-label"] });
  window.Redoc.init(container.getAttribute("data-spec-url"), options, container, function (error) {
    nameMenuByContent(container);
    container.setAttribute("data-rendered", error ? "error" : "yes");
    if (error) {
      container.textContent = "The reference could not be rendered: " + error;
    }
  });
})();
