// Small behaviours of the dashboard: styled confirmations, copy buttons, the project/environment switcher and
// the usage charts (uPlot). Everything else is plain forms and htmx attributes.
// Confirmations in the page's own styled <dialog>, not the browser's confirm(): the form is submitted
// (with the button that was pressed) only after "Confirm"; Cancel or Escape leaves it.
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  const dialog = document.getElementById("confirm-dialog");
  if (!form || !dialog) return;
  if (form.dataset.confirmed === "yes") {
    delete form.dataset.confirmed;
    return;
  }
  event.preventDefault();
  const submitter = event.submitter;
  document.getElementById("confirm-text").textContent = form.dataset.confirm;
  dialog.returnValue = "";
  dialog.addEventListener("close", () => {
    if (dialog.returnValue !== "confirm") return;
    form.dataset.confirmed = "yes";
    form.requestSubmit(submitter && submitter.form === form ? submitter : undefined);
  }, { once: true });
  dialog.showModal();
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

// Y-axis labels short enough for the axis (uPlot's default "12,345,678" is clipped to "5,678"), and
// whole-number ticks only: counts have no quarters, and an empty chart shows 0 and 1, not 0.25.
const UNITS = { bytes: ["B", "kB", "MB", "GB", "TB"], count: ["", "k", "M", "G", "T"] };
const WHOLE_STEPS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12]
  .map((p) => m * p)).sort((a, b) => a - b);

function compact(value, unit) {
  const names = UNITS[unit] || UNITS.count;
  let i = 0;
  while (Math.abs(value) >= 1000 && i < names.length - 1) { value /= 1000; i += 1; }
  const text = i === 0 ? String(Math.round(value)) : String(Number(value.toFixed(value < 10 ? 1 : 0)));
  return names[i] && unit === "bytes" ? `${text} ${names[i]}` : text + names[i];
}

window.dashboardCharts = {};

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
    const yAxis = { incrs: WHOLE_STEPS, size: 60, values: (u, splits) => splits.map((v) => compact(v, chart.unit)) };
    const options = {
      width: el.clientWidth || 480,
      height: 200,
      series,
      axes: [{}, yAxis],
      scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    };
    window.dashboardCharts[el.dataset.chart] = new uPlot(options, data, el);
  }
}
window.addEventListener("load", drawCharts);

// A group's lag over time: every refresh of its live panel (htmx, every 2 s) adds a sample, kept in this
// tab's sessionStorage (the last 300: ten minutes) so a reload keeps the line; drawn with uPlot.
const LAG_SAMPLES = 300;

function recordLag() {
  const el = document.querySelector("[data-lag-chart]");
  const shown = document.querySelector('[data-testid="total-lag"]');
  if (!el || !shown || !window.uPlot) return;
  const key = "queuecore-lag:" + el.dataset.lagChart;
  const samples = JSON.parse(sessionStorage.getItem(key) || "[]");
  samples.push([Math.floor(Date.now() / 1000), Number(shown.textContent)]);
  while (samples.length > LAG_SAMPLES) samples.shift();
  sessionStorage.setItem(key, JSON.stringify(samples));
  const data = [samples.map((s) => s[0]), samples.map((s) => s[1])];
  const existing = window.dashboardCharts.lag;
  if (existing) {
    existing.setData(data);
    return;
  }
  const yAxis = { incrs: WHOLE_STEPS, size: 60, values: (u, splits) => splits.map((v) => compact(v)) };
  window.dashboardCharts.lag = new uPlot({
    width: el.clientWidth || 480,
    height: 200,
    series: [{}, { label: "Lag", stroke: "#2957d9", fill: "rgba(41,87,217,0.1)" }],
    axes: [{}, yAxis],
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } },
  }, data, el);
}
window.addEventListener("load", recordLag);
// The live panel is swapped outerHTML: htmx:load fires on the new element.
document.addEventListener("htmx:load", (event) => {
  if (event.target && event.target.id === "group-live") recordLag();
});
