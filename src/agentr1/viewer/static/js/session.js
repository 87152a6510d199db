// One session as its steps: messages sent and seen, the sampled action, its tokens coloured by
// logprob, feedback and rewards; its branch tree when it forked; then the session as the trainer's rows
// with the training mask.
import { branchTree, filterRows, selectBranch } from "./branches.js";
import {
  api, badge, errorBox, fmt, h, link, logprobLegend, messageView, setCrumbs, short, stat, tokenSpan, toolCallView, fill,
} from "./util.js";

export async function renderSession(main, sessionId) {
  const detail = await api(`/sessions/${encodeURIComponent(sessionId)}`);
  const s = detail.session;
  setCrumbs(link("/", "runs"), s.run_id ? link(`/runs/${encodeURIComponent(s.run_id)}`, s.run_id) : "-", short(s.id));
  const rowsBox = h("div", { id: "rows" }, h("p", { class: "muted" }, "loading rows…"));
  fill(main,
    h("h1", {}, "Session ", h("span", { class: "mono" }, s.id), " ", badge(s.status)),
    h("div", { class: "cards" },
      stat("run", s.run_id ? link(`/runs/${encodeURIComponent(s.run_id)}`, short(s.run_id)) : "-"),
      stat("task", s.task_id || "-"),
      stat("group", s.group_id ? link(`/groups/${encodeURIComponent(s.group_id)}?run=${encodeURIComponent(s.run_id || "")}`, short(s.group_id)) : "-"),
      stat("reward", h("span", { id: "session-reward" }, fmt(s.reward))),
      stat("steps", s.n_steps), stat("policy at start", `v${s.policy_version}`),
      stat("drifted steps", detail.steps.filter((st) => st.drift).length),
      stat("branches", h("span", { id: "n-branches" }, detail.branches.length))),
    s.error ? errorBox(`error: ${s.error}`) : null,
    rewardsView(detail.rewards),
    h("p", { class: "muted" }, detail.tokenizer ? `tokens decoded with ${detail.tokenizer}` :
      "no tokenizer: token ids are shown as #id (start the viewer with --tokenizer MODEL_DIR)"),
    logprobLegend(),
    branchTree(detail, main),
    detail.steps.map(stepView),
    h("h2", {}, "Training rows (what the trainer sees)"),
    rowsBox);
  const chosen = new URLSearchParams(location.search).get("branch");
  if (chosen !== null && detail.branches.length > 1) selectBranch(main, detail, Number(chosen), { push: false });
  if (location.hash) document.querySelector(location.hash)?.scrollIntoView();
  renderRows(rowsBox, sessionId, "merged");
}

function rewardsView(rewards) {
  if (!rewards.length) return h("p", { class: "muted" }, "no rewards recorded");
  return h("details", { open: rewards.length <= 6 }, h("summary", {}, `${rewards.length} rewards`),
    h("div", { class: "kv", id: "rewards" }, rewards.map((r) =>
      h("span", {}, `${r.name}${r.step_index !== null ? ` (step ${r.step_index})` : ""} = `, h("b", {}, fmt(r.value)), ` · ${r.source}`))));
}

function stepView(step) {
  const tokens = step.action_tokens;
  const logprobs = tokens.map((t) => t.logprob).filter((x) => x !== null && x !== undefined);
  const meanLp = logprobs.length ? logprobs.reduce((a, b) => a + b, 0) / logprobs.length : null;
  const seen = new Set(step.seen_diff);
  const action = step.action || {};
  return h("section", { class: "card step", id: `step-${step.index}`, dataset: { step: step.index } },
    h("div", { class: "head" },
      h("h3", {}, `Step ${step.index}`),
      step.branch !== null ? badge(`branch ${step.branch}`, "branch") : badge("superseded by a retry", "drift"),
      badge(`policy v${step.policy_version}`, ""),
      step.finish_reason ? badge(`finish: ${step.finish_reason}`, "") : null,
      step.drift ? badge("drift: history rewritten, prompt re-rendered", "drift") : null,
      step.seen_differs ? badge("context policy changed the messages", "differs") : null,
      !step.trainable ? badge("not trainable", "") : null),
    h("div", { class: "kv" },
      h("span", {}, "reward ", h("b", { class: "step-reward" }, fmt(step.reward))),
      h("span", {}, "observation ", h("b", {}, step.n_observation), " tokens",
        step.extends_previous === null ? "" : step.extends_previous ? ` (${step.n_new_observation} new, extends step ${step.compared_to})` : ` (does not extend step ${step.compared_to})`),
      h("span", {}, "action ", h("b", {}, tokens.length), " tokens"),
      meanLp !== null ? h("span", {}, "mean logprob ", h("b", {}, fmt(meanLp))) : null,
      step.latency_ms !== null ? h("span", {}, "latency ", h("b", {}, `${fmt(step.latency_ms, 0)} ms`)) : null,
      step.model ? h("span", {}, "model ", h("b", {}, step.model), ` · ${step.backend}`) : null),
    h("div", { class: "cols" },
      h("div", { class: "sent" }, h("h3", {}, "Messages the agent sent"), step.messages_sent.map((m) => messageView(m))),
      h("div", { class: "seen" }, h("h3", {}, "What the model saw (after the context policy)"),
        step.seen_differs ? [
          step.n_dropped ? h("p", { class: "badge differs dropped" }, `${step.n_dropped} sent message(s) left out`) : null,
          step.messages_seen.map((m, i) => messageView(m, { diff: seen.has(i) }))]
          : h("p", { class: "muted" }, step.messages_seen.length ? "identical to what was sent" : "not recorded"))),
    h("h3", {}, "Action"),
    h("div", { class: "action" },
      action.reasoning ? h("div", { class: "msg" }, h("div", { class: "role" }, "reasoning"), h("div", { class: "content" }, action.reasoning)) : null,
      action.content ? h("div", { class: "msg assistant" }, h("div", { class: "role" }, "content"), h("div", { class: "content" }, action.content)) : null,
      (action.tool_calls || []).length ? h("div", { class: "tool-calls" }, h("div", { class: "muted" }, "tool calls"), action.tool_calls.map(toolCallView)) : null),
    h("details", { open: true }, h("summary", {}, "sampled tokens (mask 1), coloured by logprob"),
      h("div", { class: "tokens action-tokens", dataset: { step: step.index } }, tokens.map((t) => tokenSpan(t)))),
    step.children.length > 1 ? h("p", { class: "forked" }, badge("forked", "branch"),
      ` continued by steps ${step.children.join(", ")}; the feedback below is the last one's (step ${step.children.at(-1)}), ` +
      "each continuation's own is in its observation") : null,
    step.feedback_messages ? h("div", {}, h("h3", {}, "Feedback (e", h("sub", {}, "t"), ")",
      h("span", { class: "muted" }, step.n_feedback !== null ? ` · ${step.n_feedback} tokens` : "")),
    h("div", { class: "feedback" }, step.feedback_messages.map((m) => messageView(m)))) : null,
    step.tools ? h("details", {}, h("summary", {}, `${step.tools.length} tools offered`),
      h("pre", { class: "mono" }, JSON.stringify(step.tools, null, 2))) : null,
    Object.keys(step.sampling || {}).length ? h("details", {}, h("summary", {}, "sampling parameters"),
      h("pre", { class: "mono" }, JSON.stringify(step.sampling, null, 2))) : null);
}

async function renderRows(box, sessionId, layout) {
  let rows;
  try {
    rows = await api(`/sessions/${encodeURIComponent(sessionId)}/rows`, { layout });
  } catch (err) {
    fill(box, errorBox(err));
    return;
  }
  const toggle = h("select", { id: "layout" }, ["merged", "per_step"].map((l) => h("option", { value: l, selected: l === layout }, l)));
  toggle.addEventListener("change", () => renderRows(box, sessionId, toggle.value));
  const breaks = Object.entries(rows.metrics).filter(([k]) => k.startsWith("new_row_")).map(([k, v]) => `${k.slice(8)}: ${v}`);
  fill(box,
    h("p", { class: "muted" }, "layout ", toggle,
      ` · ${rows.rows.length} row(s), as the trainer trains on them`,
      breaks.length ? ` · new rows because of ${breaks.join(", ")}` : ""),
    h("div", { class: "legend" },
      h("span", {}, h("span", { class: "sw", style: "background:#eceef2" }), "prompt (mask 0)"),
      h("span", {}, h("span", { class: "sw", style: "background:#e3ecff" }), "feedback / observation (mask 0)"),
      h("span", {}, h("span", { class: "sw", style: "background:hsl(100,75%,80%)" }), "sampled action (mask 1, coloured by logprob)")),
    rows.rows.map((row, i) => h("div", { class: "card row", dataset: { row: i, steps: row.steps.join(",") } },
      h("div", { class: "kv" }, h("span", {}, "row ", h("b", {}, i)), h("span", {}, "steps ", h("b", {}, row.steps.join(", "))),
        h("span", {}, h("b", {}, row.n_tokens), " tokens"), h("span", {}, h("b", {}, row.n_action), " trained (mask 1)"),
        h("span", {}, "prompt ", h("b", {}, row.prompt_len))),
      h("div", { class: "mask-strip", title: "training mask, one cell per token" }, maskStrip(row.tokens)),
      h("details", {}, h("summary", {}, `prompt: ${row.prompt_len} tokens (mask 0)`),
        h("div", { class: "tokens prompt-tokens" }, row.tokens.slice(0, row.prompt_len).map((t) => tokenSpan(t, { showMask: true })))),
      h("div", { class: "tokens response-tokens" }, row.tokens.slice(row.prompt_len).map((t) => tokenSpan(t, { showMask: true }))))));
  filterRows(box.closest("#app"));
}

function maskStrip(tokens) {
  const canvas = h("canvas", { width: Math.min(1200, Math.max(200, tokens.length)), height: 10, style: "width:100%;height:10px" });
  const ctx = canvas.getContext("2d");
  const w = canvas.width / tokens.length;
  tokens.forEach((t, i) => {
    ctx.fillStyle = t.mask ? "#1f8a4c" : t.kind === "feedback" ? "#9db5f0" : "#d5d9e1";
    ctx.fillRect(i * w, 0, Math.max(w, 0.5), 10);
  });
  return canvas;
}
