// Render the maths that pymdownx.arithmatex (generic mode) leaves as \( ... \) and
// \[ ... \] inside .arithmatex spans and divs, with the KaTeX bundled in assets/katex/
// (nothing is fetched at view time). document$ is Material's page-load observable, so
// pages reached by instant navigation are rendered too.
function renderMaths(root) {
  renderMathInElement(root, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    ignoredClasses: ["highlight"],
    throwOnError: false,
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(function (page) { renderMaths(page.body || document.body); });
} else {
  document.addEventListener("DOMContentLoaded", function () { renderMaths(document.body); });
}
