// "Copy" buttons: <button data-copy="#element-id"> copies that element's text to the clipboard
// and says so for two seconds. Hidden until this script runs (no JavaScript: select and copy by
// hand). Loaded from static/ (the CSP forbids inline scripts); listens on the document so
// buttons swapped in by htmx work too.
(function () {
  function reveal(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) { button.hidden = false; });
  }
  document.addEventListener("DOMContentLoaded", function () { reveal(document); });
  document.addEventListener("htmx:afterSwap", function (event) { reveal(event.target); });
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) { return; }
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      var label = button.textContent;
      button.textContent = button.getAttribute("data-copied") || label;
      setTimeout(function () { button.textContent = label; }, 2000);
    });
  });
})();
