// Small helpers shared by the pages: the JSON API, element building, formatting, tokens, messages.

export async function api(path, params = {}, init = {}) {
  const url = new URL("/api" + path, location.origin);
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") continue;
    for (const item of Array.isArray(v) ? v : [v]) url.searchParams.append(k, item);
  }
  const response = await fetch(url, init);
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error((body && body.error && body.error.message) || `${response.status} ${url.pathname}`);
  return body;
}

export function post(path, body) {
  return api(path, {}, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

// h("div", {class: "x", onclick: fn}, child, "text", [more children])
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  append(node, children);
  return node;
}

// Replace a node's children; like h(), skips null/false and flattens arrays.
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

export const link = (href, text, attrs = {}) => h("a", { href, ...attrs }, text);
export const short = (id) => (id && id.length > 14 ? id.slice(0, 12) + "…" : id || "-");

export function fmt(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "-";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
  return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(2) : x.toFixed(digits);
}

export function signed(x, digits = 3) {
  if (x === null || x === undefined) return h("span", { class: "muted" }, "-");
  return h("span", { class: x > 0 ? "pos" : x < 0 ? "neg" : "" }, (x > 0 ? "+" : "") + fmt(x, digits));
}

export function when(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export const badge = (text, cls = text) => h("span", { class: `badge ${cls}` }, text);
export const stat = (k, v) => h("div", { class: "stat" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));

export function setCrumbs(...parts) {
  const crumbs = document.getElementById("crumbs");
  fill(crumbs, ...parts.flatMap((p, i) => (i ? [" / ", p] : [p])));
  document.title = ["agentr1", ...parts.map((p) => (p instanceof Node ? p.textContent : p))].join(" · ");
}

export function table(columns, rows, attrs = {}) {
  // columns: [{title, num?, cell: row => node|string}]
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.title)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", { dataset: r.__data || {} },
      columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(r)))))
      : h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "nothing here"))));
}

export function pager(page, onPage) {
  const { total, limit, offset } = page;
  const last = Math.min(offset + limit, total);
  return h("div", { class: "pager" },
    h("button", { class: "secondary", disabled: offset <= 0, onclick: () => onPage(Math.max(0, offset - limit)) }, "‹ prev"),
    h("span", { class: "muted", "data-total": total }, total ? `${offset + 1}–${last} of ${total}` : "0 of 0"),
    h("button", { class: "secondary", disabled: last >= total, onclick: () => onPage(offset + limit) }, "next ›"));
}

export function errorBox(err) {
  return h("div", { class: "error" }, String(err && err.message ? err.message : err));
}

// -- tokens ------------------------------------------------------------------------------------

export function logprobColor(lp) {
  if (lp === null || lp === undefined) return null;
  const p = Math.exp(Math.max(lp, -20));
  return `hsl(${Math.round(120 * p)}, 75%, ${Math.round(82 - 6 * (1 - p))}%)`;
}

export function tokenSpan(t, { showMask = false } = {}) {
  const text = t.text === null || t.text === undefined ? `#${t.id}` : t.text;
  const cls = ["tok"];
  if (text === "\n" || text.endsWith("\n")) cls.push("nl");
  if (/^<\|.*\|>$/.test(text)) cls.push("special");
  if (showMask) cls.push(`mask${t.mask}`, t.kind);
  const title = [`id ${t.id}`, t.logprob !== null && t.logprob !== undefined ? `logprob ${t.logprob.toFixed(4)} (p=${Math.exp(t.logprob).toFixed(3)})` : null,
    `mask ${t.mask}`, t.step !== null && t.step !== undefined ? `step ${t.step} ${t.kind}` : t.kind].filter(Boolean).join(" · ");
  const span = h("span", { class: cls.join(" "), title, dataset: { id: t.id, mask: t.mask, kind: t.kind, step: t.step ?? "" } }, text);
  const color = t.mask === 1 || !showMask ? logprobColor(t.logprob) : null;
  if (color) span.style.background = color;
  return span;
}

export function logprobLegend() {
  const sw = (lp) => h("span", { class: "sw", style: `background:${logprobColor(lp)}` });
  return h("div", { class: "legend" }, "token probability:", h("span", {}, sw(0), "p≈1"), h("span", {}, sw(Math.log(0.5)), "0.5"),
    h("span", {}, sw(Math.log(0.1)), "0.1"), h("span", {}, sw(-8), "< 0.001"), h("span", { class: "muted" }, "(hover a token for id and logprob)"));
}

// -- messages ----------------------------------------------------------------------------------

export function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p.type === "text" ? p.text : `[${p.type}]`)).join("");
  return JSON.stringify(content);
}

export function toolCallView(call) {
  const fn = call.function || {};
  let args = fn.arguments;
  try { args = JSON.stringify(JSON.parse(args), null, 1).replace(/\n\s*/g, " "); } catch (_) { /* keep as sent */ }
  return h("div", { class: "toolcall" }, `${fn.name}(${args})`, call.id ? h("span", { class: "muted" }, `  ${call.id}`) : null);
}

const IMAGE_REF = "agentr1-image:";

// The src of an image part in any API's shape (OpenAI image_url, Responses input_image, Anthropic image):
// stored references are served by the viewer (/api/images/<sha256>), data URLs shown as they are.
export function imageSrc(part) {
  let url = part.type === "image" ? null : (typeof part.image_url === "string" ? part.image_url : (part.image_url || {}).url);
  if (part.type === "image" && part.source) {
    const data = part.source.data || "";
    url = data.startsWith(IMAGE_REF) ? data : (part.source.url || `data:${part.source.media_type};base64,${data}`);
  }
  if (typeof url !== "string") return null;
  if (url.startsWith(IMAGE_REF)) return `/api/images/${url.slice(IMAGE_REF.length)}`;
  return url.startsWith("data:image/") ? url : null;
}

const IMAGE_TYPES = new Set(["image_url", "input_image", "image"]);

function contentView(content) {
  if (!Array.isArray(content) || !content.some((p) => p && IMAGE_TYPES.has(p.type))) {
    return contentText(content) ? h("div", { class: "content" }, contentText(content)) : null;
  }
  return h("div", { class: "content" }, content.map((p) => {
    if (!p || !IMAGE_TYPES.has(p.type)) return contentText([p]);
    const src = imageSrc(p);
    return src ? h("img", { class: "msg-image", src, alt: "image", loading: "lazy" }) : `[${p.type}]`;
  }));
}

export function messageView(m, { diff = false } = {}) {
  return h("div", { class: `msg ${m.role}${diff ? " diff" : ""}` },
    h("div", { class: "role" }, h("span", { class: "rolename" }, m.role), m.name ? ` (${m.name})` : "",
      m.tool_call_id ? h("span", { class: "muted mono" }, ` → ${m.tool_call_id}`) : "", diff ? "  ≠ not sent by the agent" : ""),
    contentView(m.content),
    m.reasoning_content ? h("div", { class: "content muted" }, m.reasoning_content) : null,
    (m.tool_calls || []).map(toolCallView));
}
