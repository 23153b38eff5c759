// Small behaviours of the dashboard: confirmations, copy buttons, the project/environment switcher and
// the usage charts (uPlot). Everything else is plain forms and htmx attributes.
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});

document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.querySelector(button.dataset.copy);
  field.select();
  try { await navigator.clipboard.writeText(field.value); } catch { document.execCommand("copy"); }
  button.textContent = "Copied";
});

document.addEventListener("change", (event) => {
  const form = event.target.closest("form[data-switcher]");
  if (form) form.requestSubmit();
});

function drawCharts() {
  const source = document.getElementById("usage-data");
  if (!source || !window.uPlot) return;
  const charts = JSON.parse(source.textContent);
  for (const el of document.querySelectorAll("[data-chart]")) {
    const chart = charts[el.dataset.chart];
    const series = [{}, { label: chart.label, stroke: "#2957d9", fill: "rgba(41,87,217,0.1)" }];
    const data = [chart.x, chart.y];
    if (chart.limit) {
      series.push({ label: "Limit", stroke: "#b42318", dash: [6, 4] });
      data.push(chart.x.map(() => chart.limit));
    }
    new uPlot({ width: el.clientWidth || 480, height: 200, series, scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } } }, data, el);
  }
}
window.addEventListener("load", drawCharts);
