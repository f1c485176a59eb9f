// Inventory pages: pause htmx polling while the tab is hidden (elements marked
// data-poll-visible-only); their "visibilitychange from:document" trigger refreshes them as
// soon as the tab is shown again. Loaded from static/ (CSP forbids inline scripts).
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail && event.detail.elt;
  if (document.hidden && elt && elt.hasAttribute && elt.hasAttribute("data-poll-visible-only")) {
    event.preventDefault();
  }
});
