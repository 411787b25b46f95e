// The diff page's one script (the page reads the same without it, the first divergence then
// reached by autofocus): bring the first divergence to the middle of the screen.
(function () {
  "use strict";
  var first = document.getElementById("first-divergence");
  if (first && !location.hash) {
    first.open = true;
    first.scrollIntoView({ block: "center" });
  }
})();
