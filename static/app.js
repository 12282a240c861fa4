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

  // Colour-blind-safe palette (Okabe-Ito), then greys.
  var PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999"];

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

  document.addEventListener("DOMContentLoaded", function () { drawCharts(document); });
  document.addEventListener("htmx:load", function (event) { drawCharts(event.detail.elt); });
  // After an htmx navigation, move focus to the new content so keyboard and screen-reader users follow.
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "main") event.detail.target.focus({ preventScroll: true });
  });
})();
