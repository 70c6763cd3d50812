// The topic page's charts, drawn as SVG: the last hour's lateness and throughput, and the
// next hour's or day's due tasks.
import { rate, seconds, svg } from "./core.js";

// The last hour as x from 0 to `width`: a window's start maps to its place.
const HOUR_MS = 3600 * 1000;

export function drawActivity(latenessChart, throughputChart, activity) {
  const width = 600, height = 120, bottom = 14, top = 6;
  const end = Date.now(), start = end - HOUR_MS;
  const span = activity.window_seconds * 1000;
  const x = (iso) => ((new Date(iso).getTime() - start) / HOUR_MS) * width;
  const step = (span / HOUR_MS) * width;
  const windows = activity.windows.filter((w) => new Date(w.start).getTime() + span > start);
  const axis = (chart) => {
    for (const minutes of [60, 45, 30, 15, 0]) {
      const label = svg("text", { x: Math.min(width - 30, ((HOUR_MS - minutes * 60000) / HOUR_MS) * width + 2), y: height - 2 });
      label.textContent = minutes ? `-${minutes} min` : "now";
      chart.append(label);
    }
  };
  // Throughput: one bar per window.
  throughputChart.replaceChildren();
  throughputChart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const most = Math.max(0.1, ...windows.map((w) => w.throughput));
  for (const w of windows) {
    const h = (w.throughput / most) * (height - bottom - top);
    const rect = svg("rect", { x: x(w.start), y: height - bottom - h, width: Math.max(1, step - 0.5), height: h, class: "bar done" });
    const title = svg("title", {});
    title.textContent = `${new Date(w.start).toLocaleTimeString()}: ${rate(w.throughput)}/s (${w.acked} acked, ${w.retried} retried, ${w.dead} dead)`;
    rect.append(title);
    throughputChart.append(rect);
  }
  const peak = svg("text", { x: 2, y: top + 8 });
  peak.textContent = windows.length ? `${rate(most)}/s` : "";
  throughputChart.append(peak);
  axis(throughputChart);
  // Lateness p50 and p99 on a log scale from 1 ms, a line through consecutive windows.
  latenessChart.replaceChildren();
  latenessChart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const values = windows.flatMap((w) => [w.lateness_p50, w.lateness_p99]).filter((v) => v !== null);
  const ceiling = Math.max(0.01, ...values);
  const decades = Math.ceil(Math.log10(ceiling / 0.001));
  const y = (v) => height - bottom - (Math.log10(Math.max(v, 0.001) / 0.001) / decades) * (height - bottom - top);
  for (let d = 0; d <= decades; d += 1) {
    const v = 0.001 * 10 ** d;
    latenessChart.append(svg("line", { x1: 0, x2: width, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: 2, y: y(v) - 2 < top + 4 ? y(v) + 10 : y(v) - 2 });
    label.textContent = seconds(Number(v.toPrecision(1)));
    latenessChart.append(label);
  }
  for (const key of ["lateness_p50", "lateness_p99"]) {
    let path = "", last = null;
    for (const w of windows) {
      if (w[key] === null) { last = null; continue; }
      const at = new Date(w.start).getTime();
      const px = x(w.start) + step / 2, py = y(w[key]);
      path += `${last !== null && at - last <= span ? "L" : "M"}${px.toFixed(1)} ${py.toFixed(1)} `;
      last = at;
      const dot = svg("circle", { cx: px, cy: py, r: 1.6, class: key.slice(9) });
      const title = svg("title", {});
      title.textContent = `${new Date(w.start).toLocaleTimeString()}: ${key.slice(9)} ≤ ${seconds(w[key])} (${w.started} starts)`;
      dot.append(title);
      latenessChart.append(dot);
    }
    if (path) latenessChart.append(svg("path", { d: path, class: `line ${key.slice(9)}` }));
  }
  axis(latenessChart);
}

export const SPANS = { hour: { window: 60, windows: 60, unit: "min" }, day: { window: 3600, windows: 24, unit: "h" } };

export function drawTimeline(chart, timeline, span) {
  const bars = [{ count: timeline.due, due: true, estimated: timeline.due_estimated, label: "now" }]
    .concat(timeline.windows.map((w, i) => ({ count: w.count, estimated: w.estimated, label: `${i + 1}` })));
  const width = 600, height = 150, gap = 1, bottom = 16;
  const most = Math.max(1, ...bars.map((b) => b.count));
  const step = width / bars.length;
  chart.replaceChildren();
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  bars.forEach((bar, i) => {
    const h = bar.count ? Math.max(1, (bar.count / most) * (height - bottom - 4)) : 0;
    const rect = svg("rect", {
      x: i * step + gap, y: height - bottom - h, width: Math.max(1, step - 2 * gap), height: h,
      class: `bar${bar.due ? " due" : ""}${bar.estimated ? " estimated" : ""}`,
    });
    const title = svg("title", {});
    title.textContent = bar.due ? `${bar.count} due now` : `${bar.count}${bar.estimated ? " (estimated)" : ""} due in ${span.unit} ${bar.label}`;
    rect.append(title);
    chart.append(rect);
    if (i === 0 || i % Math.ceil(bars.length / 6) === 0) {
      const label = svg("text", { x: i * step + 2, y: height - 3 });
      label.textContent = i === 0 ? "now" : `+${bar.label} ${span.unit}`;
      chart.append(label);
    }
  });
}
