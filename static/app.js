/* Page behaviour shared by every template. No inline scripts: data comes from JSON <script> blocks.
 *
 * Charts: <canvas data-chart="ID"> draws the JSON in <script type="application/json" id="ID">
 * ({labels, datasets:[{label, data}]}) with Chart.js. Optional attributes on the canvas:
 * data-chart-type (default "bar"), data-chart-axis ("y" = horizontal bars, the default for bar),
 * data-chart-stacked ("false" to unstack), data-chart-unit (axis title, default "GPU-hours").
 * Charts are (re)drawn on page load and whenever htmx swaps new content in.
 */
(function () {
  "use strict";

  // Series that are no workload class (services, busy/dark) take these Okabe-Ito colours in order;
  // class series carry their fixed colour in the data (app/web/charts.py CLASS_COLOURS), so a
  // class looks the same on every chart, whatever order its datasets come in.
  var PALETTE = ["#56B4E9", "#D55E00", "#F0E442", "#999999"];

  function drawCharts(root) {
    if (!window.Chart || !root || !root.querySelectorAll) return;
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var source = document.getElementById(canvas.dataset.chart);
      if (!source) return;
      var data = JSON.parse(source.textContent);
      var type = canvas.dataset.chartType || "bar";
      var axis = canvas.dataset.chartAxis || (type === "bar" ? "y" : "x");
      var stacked = canvas.dataset.chartStacked !== "false";
      var unit = canvas.dataset.chartUnit || "GPU-hours";
      data.datasets.forEach(function (d, i) {
        var colour = d.color || PALETTE[i % PALETTE.length];
        d.backgroundColor = d.backgroundColor || colour;
        d.borderColor = d.borderColor || colour;
        d.spanGaps = false;  // null = no data: a gap, never drawn as zero
      });
      if (type === "bar" && axis === "y") {
        // One row per label: tall enough to read every tenant name, on a phone too.
        canvas.parentElement.style.height = Math.max(220, 60 + 34 * data.labels.length) + "px";
      }
      var existing = window.Chart.getChart(canvas);
      if (existing) existing.destroy();
      var valueAxis = { stacked: stacked, beginAtZero: true, title: { display: true, text: unit } };
      var labelAxis = { stacked: stacked, ticks: { autoSkip: false } };
      new window.Chart(canvas, {
        type: type,
        data: data,
        options: {
          indexAxis: axis,
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          scales: axis === "y" ? { x: valueAxis, y: labelAxis } : { x: labelAxis, y: valueAxis },
          plugins: {
            legend: { position: "bottom" },
            tooltip: {
              callbacks: {
                label: function (ctx) {
                  var v = ctx.parsed[axis === "y" ? "x" : "y"];
                  if (v === null || v === undefined || isNaN(v)) return ctx.dataset.label + ": no data";
                  return ctx.dataset.label + ": " + v.toLocaleString(undefined, { maximumFractionDigits: 1 }) + " " + unit;
                }
              }
            }
          }
        }
      });
      canvas.dataset.rendered = "true";
    });
  }

  // A region that scrolls (a wide table on a phone, a long list in a box) must be reachable by keyboard
  // (WCAG 2.1.1): every scrolling container in the page gets tabindex=0 and a name.
  var SCROLLS = /(auto|scroll)/;
  function focusableScrollers(root) {
    if (!root || !root.querySelectorAll) return;
    root.querySelectorAll("main div, main table, main ul, main ol, main pre, main section").forEach(function (el) {
      if (el.hasAttribute("tabindex")) return;
      var style = window.getComputedStyle(el);
      var wide = SCROLLS.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
      var tall = SCROLLS.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
      if (!wide && !tall) return;
      el.setAttribute("tabindex", "0");
      if (/^(DIV|SECTION|PRE)$/.test(el.tagName) && !el.hasAttribute("role")) el.setAttribute("role", "region");
      if (!el.hasAttribute("aria-label") && !el.hasAttribute("aria-labelledby")) {
        var caption = el.querySelector("caption");
        el.setAttribute("aria-label", caption ? caption.textContent.trim() : "Scrollable region");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () { drawCharts(document); focusableScrollers(document); });
  document.addEventListener("htmx:load", function (event) { drawCharts(event.detail.elt); focusableScrollers(event.detail.elt); });
  window.addEventListener("resize", function () { focusableScrollers(document); });
  // After an htmx navigation, move focus to the new content so keyboard and screen-reader users follow.
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "main") event.detail.target.focus({ preventScroll: true });
  });
})();
