// The documentation site's accessibility fixes over the theme's behaviour (tests/test_accessibility.py audits every
// page with axe-core at a phone's and a desktop's width).
//
// A code block or a table wider than the screen scrolls sideways; a keyboard can scroll it only once it can take
// focus (WCAG 2.1.1). The theme makes such a block focusable on screens with a pointer that hovers only (not on a
// phone's touch screen, nor a keyboard user's tablet), and never its tables: here every one that scrolls is, and
// stays so when the theme takes the attribute away. The search dialog gets a name, which the theme leaves out.
(function () {
  var SCROLLING = ".md-typeset pre > code, .md-typeset table:not([class]), .md-typeset__scrollwrap";

  function fix() {
    document.querySelectorAll(SCROLLING).forEach(function (el) {
      if (el.scrollWidth > el.clientWidth + 1 && el.getAttribute("tabindex") !== "0") {
        el.setAttribute("tabindex", "0");
      }
    });
    document.querySelectorAll("[role=dialog]:not([aria-label]):not([aria-labelledby])").forEach(function (el) {
      el.setAttribute("aria-label", el.classList.contains("md-search") ? "Search" : "Dialog");
    });
  }

  fix();
  addEventListener("load", fix);
  addEventListener("resize", fix);
  new MutationObserver(fix).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                    attributeFilter: ["tabindex", "role"]});
})();
