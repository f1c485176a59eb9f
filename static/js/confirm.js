// Forms marked data-confirm="question" ask before they submit (release and terminate delete a VM
// and its disk; cancel withdraws a request). Without JavaScript the form submits as before.
// Loaded from static/ (the CSP forbids inline scripts).
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form && form.getAttribute && form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
}, true);
