// A small SVG line chart (no library): training step on x, one metric on y.
import { fmt, h } from "./util.js";

const NS = "http://www.w3.org/2000/svg";

function s(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function tick(y, range) {
  if (y === 0) return "0";
  const digits = Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(range || 1))));
  return Math.abs(y) >= 1e4 || Math.abs(y) < 1e-4 ? y.toExponential(1) : y.toFixed(digits);
}

export function lineChart(title, points, { width = 360, height = 190, color = "#3157d5" } = {}) {
  const pad = { l: 46, r: 10, t: 8, b: 24 };
  const data = points.filter((p) => typeof p.y === "number" && Number.isFinite(p.y));
  const box = h("div", { class: "chart", "data-metric": title, "data-points": data.length }, h("div", { class: "title" }, title));
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  box.append(svg);
  if (!data.length) {
    svg.append(s("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "no data"));
    return box;
  }
  let [x0, x1] = [Math.min(...data.map((p) => p.x)), Math.max(...data.map((p) => p.x))];
  let [y0, y1] = [Math.min(...data.map((p) => p.y)), Math.max(...data.map((p) => p.y))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
  const Y = (y) => height - pad.b - ((y - y0) / (y1 - y0)) * (height - pad.t - pad.b);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    svg.append(s("line", { x1: pad.l, x2: width - pad.r, y1: Y(y), y2: Y(y), stroke: "#eceef2" }));
    svg.append(s("text", { x: pad.l - 4, y: Y(y) + 3, "text-anchor": "end" }, tick(y, y1 - y0)));
  }
  svg.append(s("text", { x: pad.l, y: height - 6 }, `step ${fmt(x0)}`));
  svg.append(s("text", { x: width - pad.r, y: height - 6, "text-anchor": "end" }, fmt(x1)));
  const path = data.map((p, i) => `${i ? "L" : "M"}${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`).join(" ");
  svg.append(s("path", { d: path, fill: "none", stroke: color, "stroke-width": 1.8 }));
  for (const p of data.length <= 60 ? data : []) {
    const dot = s("circle", { cx: X(p.x), cy: Y(p.y), r: 2.6, fill: color });
    dot.append(s("title", {}, `step ${p.x}: ${p.y}`));
    svg.append(dot);
  }
  return box;
}

// Bars around zero, one per sample (group page): value labels under each bar.
export function barChart(title, bars, { width = 360, height = 160 } = {}) {
  const pad = { l: 10, r: 10, t: 10, b: 30 };
  const box = h("div", { class: "chart", "data-metric": title }, h("div", { class: "title" }, title));
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  box.append(svg);
  const values = bars.map((b) => (typeof b.value === "number" ? b.value : 0));
  const top = Math.max(0, ...values), bottom = Math.min(0, ...values);
  const span = top - bottom || 1;
  const Y = (v) => pad.t + ((top - v) / span) * (height - pad.t - pad.b);
  const slot = (width - pad.l - pad.r) / Math.max(1, bars.length);
  svg.append(s("line", { x1: pad.l, x2: width - pad.r, y1: Y(0), y2: Y(0), stroke: "#9aa2b3" }));
  bars.forEach((b, i) => {
    const v = values[i], x = pad.l + i * slot + slot * 0.2;
    svg.append(s("rect", { x, width: slot * 0.6, y: Math.min(Y(v), Y(0)), height: Math.max(1, Math.abs(Y(v) - Y(0))),
      fill: v >= 0 ? "#1f8a4c" : "#c23b3b", opacity: 0.8 }));
    svg.append(s("text", { x: x + slot * 0.3, y: height - 16, "text-anchor": "middle" }, b.label));
    svg.append(s("text", { x: x + slot * 0.3, y: height - 4, "text-anchor": "middle" }, fmt(b.value, 2)));
  });
  return box;
}
