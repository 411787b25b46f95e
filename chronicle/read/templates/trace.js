// The trace page's one script (the page reads the same without it): "expand all" and
// "collapse all", and a link to #call-... opens that call and the calls around it.
(function () {
  "use strict";
  var toolbar = document.getElementById("toolbar");
  function folds() { return document.querySelectorAll("input.fold"); }
  function setAll(open) { folds().forEach(function (fold) { fold.checked = open; }); }
  if (toolbar) {
    toolbar.hidden = false;
    toolbar.querySelector("[data-do=expand]").addEventListener("click", function () { setAll(true); });
    toolbar.querySelector("[data-do=collapse]").addEventListener("click", function () { setAll(false); });
  }
  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (!target || !target.classList.contains("call")) { return; }
    for (var node = target.parentElement; node; node = node.parentElement) {
      if (node.classList && node.classList.contains("call")) {
        var fold = node.querySelector(":scope > input.fold");
        if (fold) { fold.checked = true; }
      }
    }
    var details = target.querySelector(":scope > details");
    if (details) { details.open = true; }
    target.scrollIntoView({ block: "center" });
  }
  window.addEventListener("hashchange", reveal);
  reveal();
})();
