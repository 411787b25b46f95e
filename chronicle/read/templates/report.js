// The report page's one script (the page reads the same without it): show only the recordings
// that did not pass, or all; a link to #tree-N or #diff-N marks the recording it opens.
(function () {
  "use strict";
  var toolbar = document.getElementById("toolbar");
  function show(failing) {
    document.querySelectorAll("tr.recording, article.replayed").forEach(function (row) {
      row.hidden = failing && row.classList.contains("passed");
    });
  }
  if (toolbar) {
    toolbar.hidden = false;
    toolbar.querySelector("[data-do=failing]").addEventListener("click", function () { show(true); });
    toolbar.querySelector("[data-do=all]").addEventListener("click", function () { show(false); });
  }
  function mark() {
    document.querySelectorAll("article.replayed.target").forEach(function (a) { a.classList.remove("target"); });
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    var article = target ? target.closest("article.replayed") : null;
    if (article) { article.hidden = false; article.classList.add("target"); }
  }
  window.addEventListener("hashchange", mark);
  mark();
})();
