/* Dashboard charts over days or minutes, on the vendored Chart.js. No inline scripts: each
 * <canvas data-dash-chart="ID" data-kind="..."> draws the JSON of <script type="application/json" id="ID">
 * ({labels, datasets:[{label, data, color?, ...Chart.js dataset options}]}).
 * Kinds: "stacked-bars" (default), "bars" (stacked per label), "stacked-area", "line", "cumulative" (lines from
 * zero: a month's running cost, its forecast and budget lines; dataset options such as borderDash pass through).
 * A null value is a day (or minute) with no data: drawn as a gap (spanGaps false), never as zero.
 * Time axes skip labels that would overlap (app.js keeps every label: it draws one row per tenant).
 * Also scrolls .heatmap-scroll regions to their newest (right-most) column.
 */
(function () {
  "use strict";

  // Series that are no workload class (services, busy/dark) take these Okabe-Ito colours in order;
  // class series carry their fixed colour in the data (app/web/charts.py CLASS_COLOURS), so a
  // class looks the same on every chart, whatever order its datasets come in.
  var PALETTE = ["#56B4E9", "#D55E00", "#F0E442", "#999999"];

  function options(kind, unit) {
    var stacked = kind === "stacked-bars" || kind === "bars" || kind === "stacked-area";
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      interaction: { mode: "index", intersect: false },
      scales: {
        x: { stacked: stacked, ticks: { autoSkip: true, maxRotation: 0, autoSkipPadding: 12 } },
        y: { stacked: stacked, beginAtZero: kind !== "line", title: { display: true, text: unit } }
      },
      plugins: {
        legend: { position: "bottom", labels: { usePointStyle: kind === "line" } },
        tooltip: {
          callbacks: {
            label: function (ctx) {
              var v = ctx.parsed.y;
              if (v === null || v === undefined || isNaN(v)) return ctx.dataset.label + ": no data";
              return ctx.dataset.label + ": " + v.toLocaleString(undefined, { maximumFractionDigits: 1 }) + " " + unit;
            }
          }
        }
      }
    };
  }

  function draw(canvas) {
    var source = document.getElementById(canvas.dataset.dashChart);
    if (!source || !window.Chart) return;
    var data = JSON.parse(source.textContent);
    var kind = canvas.dataset.kind || "stacked-bars";
    var unit = canvas.dataset.unit || "GPU-hours";
    data.datasets.forEach(function (d, i) {
      var colour = d.color || PALETTE[i % PALETTE.length];
      d.spanGaps = false;  // a missing day stays a gap; lines never bridge it
      d.borderColor = d.borderColor || colour;
      d.backgroundColor = d.backgroundColor || (kind === "stacked-area" ? colour + "99" : colour);
      if (kind === "stacked-area") {
        d.fill = i === 0 ? "origin" : "-1";
        d.pointRadius = 0;
        d.tension = 0.2;
      }
    });
    var existing = window.Chart.getChart(canvas);
    if (existing) existing.destroy();
    new window.Chart(canvas, {
      type: kind === "stacked-bars" || kind === "bars" ? "bar" : "line",
      data: data,
      options: options(kind, unit)
    });
    canvas.dataset.rendered = "true";
  }

  function drawAll(root) {
    if (!root || !root.querySelectorAll) return;
    // Heatmaps open on their newest columns (the right end) when they scroll sideways.
    root.querySelectorAll(".heatmap-scroll").forEach(function (el) { el.scrollLeft = el.scrollWidth; });
    if (root.matches && root.matches("canvas[data-dash-chart]")) draw(root);
    root.querySelectorAll("canvas[data-dash-chart]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:load", function (event) { drawAll(event.detail.elt); });
})();
