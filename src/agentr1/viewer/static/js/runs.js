// The runs list and one run: stats, training curves (metrics.jsonl), policy versions, sessions
// (filter by status, group, reward range; sort by reward, created, steps) and task groups.
import { lineChart } from "./chart.js";
import { api, badge, errorBox, fmt, h, link, pager, setCrumbs, short, stat, table, when, fill } from "./util.js";

export async function renderRuns(main) {
  setCrumbs("runs");
  const query = new URLSearchParams(location.search);
  const offset = Number(query.get("offset") || 0);
  const page = await api("/runs", { limit: 50, offset });
  fill(main,
    h("h1", {}, "Runs"),
    table([
      { title: "run", cell: (r) => link(`/runs/${encodeURIComponent(r.id)}`, r.id, { class: "mono" }) },
      { title: "name", cell: (r) => r.name },
      { title: "sessions", num: true, cell: (r) => r.n_sessions },
      { title: "steps", num: true, cell: (r) => r.n_steps },
      { title: "mean reward", num: true, cell: (r) => fmt(r.mean_reward) },
      { title: "created", cell: (r) => when(r.created_at) },
    ], page.items.map((r) => ({ ...r, __data: { run: r.id } })), { id: "runs" }),
    pager(page, (o) => { history.pushState({}, "", `/?offset=${o}`); renderRuns(main); }));
}

const CURVES = [["reward/mean", "#1f8a4c"], ["actor/pg_loss", "#3157d5"], ["success/val", "#8a4fd1"], ["actor/kl", "#b7791f"]];

function curves(series) {
  if (!series.out_dir) {
    return h("p", { class: "muted", id: "no-curves" },
      "No training metrics: start the viewer with --runs-dir pointing at the trainer's output folder (trainer.default_local_dir).");
  }
  const wanted = CURVES.filter(([k]) => series.keys.includes(k));
  const picker = h("select", { id: "metric-pick" }, h("option", { value: "" }, "+ another metric…"),
    series.keys.filter((k) => !wanted.some(([w]) => w === k)).map((k) => h("option", { value: k }, k)));
  const box = h("div", { class: "charts", id: "curves" },
    wanted.map(([k, color]) => lineChart(k, series.points.map((p) => ({ x: p.step, y: p[k] })), { color })));
  picker.addEventListener("change", () => {
    if (picker.value) box.append(lineChart(picker.value, series.points.map((p) => ({ x: p.step, y: p[picker.value] }))));
  });
  return h("div", {}, h("p", { class: "muted mono" }, `${series.points.length} training steps from ${series.out_dir}/metrics.jsonl `, picker), box);
}

export async function renderRun(main, runId) {
  setCrumbs(link("/", "runs"), runId);
  const [detail, series, groups] = await Promise.all([
    api(`/runs/${encodeURIComponent(runId)}`), api(`/runs/${encodeURIComponent(runId)}/metrics`),
    api(`/runs/${encodeURIComponent(runId)}/groups`, { limit: 100 })]);
  const run = detail.run;
  const sessionsBox = h("div", { id: "sessions" });
  fill(main,
    h("h1", {}, `Run ${run.name && run.name !== run.id ? run.name + " · " : ""}`, h("span", { class: "mono" }, run.id)),
    h("div", { class: "cards" },
      stat("sessions", run.n_sessions), stat("steps", run.n_steps), stat("mean reward", fmt(run.mean_reward)),
      Object.entries(detail.status_counts).map(([k, v]) => stat(k, v)),
      stat("trainer output", detail.out_dir ? h("span", { class: "mono", title: `matched by ${detail.matched_by}` }, detail.out_dir.split("/").slice(-2).join("/")) : "-")),
    h("h2", {}, "Training curves"), curves(series),
    h("h2", {}, "Policy versions"),
    table([
      { title: "policy version", cell: (v) => `v${v.version}` },
      { title: "sessions", num: true, cell: (v) => v.sessions },
      { title: "steps", num: true, cell: (v) => v.steps },
    ], detail.policy_versions, { id: "versions" }),
    h("h2", {}, "Sessions"), sessionsBox,
    h("h2", {}, "Task groups"),
    table([
      { title: "group", cell: (g) => link(`/groups/${encodeURIComponent(g.group_id)}?run=${encodeURIComponent(runId)}`, g.group_id, { class: "mono" }) },
      { title: "task", cell: (g) => g.task_id || "-" },
      { title: "samples", num: true, cell: (g) => g.n },
      { title: "mean reward", num: true, cell: (g) => fmt(g.mean_reward) },
      { title: "min", num: true, cell: (g) => fmt(g.min_reward) },
      { title: "max", num: true, cell: (g) => fmt(g.max_reward) },
    ], groups.items, { id: "groups" }));
  await renderSessions(sessionsBox, runId);
}

const FILTERS = ["status", "group", "min_reward", "max_reward", "sort", "order", "offset"];

async function renderSessions(box, runId) {
  const query = new URLSearchParams(location.search);
  const value = (k, d = "") => query.get(k) ?? d;
  const field = (label, input) => h("label", {}, label, input);
  const status = h("select", { name: "status" }, ["", "running", "finished", "failed", "abandoned"].map((s) =>
    h("option", { value: s, selected: s === value("status") }, s || "any")));
  const form = h("form", { class: "filters", id: "session-filters" },
    field("status", status),
    field("group", h("input", { name: "group", value: value("group"), placeholder: "group id", size: 16 })),
    field("reward ≥", h("input", { name: "min_reward", type: "number", step: "any", value: value("min_reward"), style: "width:90px" })),
    field("reward ≤", h("input", { name: "max_reward", type: "number", step: "any", value: value("max_reward"), style: "width:90px" })),
    field("sort by", h("select", { name: "sort" }, ["created", "reward", "steps"].map((s) => h("option", { value: s, selected: s === value("sort", "created") }, s)))),
    field("order", h("select", { name: "order" }, ["desc", "asc"].map((s) => h("option", { value: s, selected: s === value("order", "desc") }, s)))),
    h("button", { type: "submit" }, "apply"),
    h("button", { type: "button", class: "secondary", onclick: () => go({}) }, "clear"));
  const go = (params) => {
    const next = new URLSearchParams();
    for (const k of FILTERS) if (params[k] !== undefined && params[k] !== "") next.set(k, params[k]);
    history.pushState({}, "", `${location.pathname}${next.toString() ? "?" + next : ""}`);
    renderSessions(box, runId);
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    go(Object.fromEntries(new FormData(form).entries()));
  });
  let page;
  try {
    page = await api("/sessions", { run: runId, status: value("status"), group: value("group"), min_reward: value("min_reward"),
      max_reward: value("max_reward"), sort: value("sort", "created"), order: value("order", "desc"), limit: 50, offset: value("offset", 0) });
  } catch (err) {
    fill(box, form, errorBox(err));
    return;
  }
  const current = Object.fromEntries(FILTERS.map((k) => [k, value(k)]));
  fill(box, form,
    table([
      { title: "session", cell: (s) => link(`/sessions/${s.id}`, short(s.id), { class: "mono", title: s.id }) },
      { title: "status", cell: (s) => badge(s.status) },
      { title: "task", cell: (s) => s.task_id || "-" },
      { title: "group", cell: (s) => (s.group_id ? link(`/groups/${encodeURIComponent(s.group_id)}?run=${encodeURIComponent(runId)}`, s.group_id, { class: "mono" }) : "-") },
      { title: "policy", num: true, cell: (s) => `v${s.policy_version}` },
      { title: "steps", num: true, cell: (s) => s.n_steps },
      { title: "reward", num: true, cell: (s) => fmt(s.reward) },
      { title: "created", cell: (s) => when(s.created_at) },
    ], page.items.map((s) => ({ ...s, __data: { session: s.id, status: s.status, reward: s.reward ?? "" } })), { id: "session-table" }),
    pager(page, (o) => go({ ...current, offset: o })));
  box.dataset.query = location.search;
}
