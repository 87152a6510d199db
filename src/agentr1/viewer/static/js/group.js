// A task group: its n samples side by side with rewards and the advantages the trainer would compute.
import { barChart } from "./chart.js";
import { api, badge, fmt, h, link, setCrumbs, short, signed, fill } from "./util.js";

export async function renderGroup(main, groupId) {
  const query = new URLSearchParams(location.search);
  const run = query.get("run") || "";
  const view = await api(`/groups/${encodeURIComponent(groupId)}`, { run, estimator: query.get("estimator") || "" });
  setCrumbs(link("/", "runs"), view.run_id ? link(`/runs/${encodeURIComponent(view.run_id)}`, view.run_id) : "-", `group ${groupId}`);
  const picker = h("select", { id: "estimator" }, (view.estimators.length ? view.estimators : [view.estimator]).map((e) =>
    h("option", { value: e, selected: e === view.estimator }, e)));
  picker.addEventListener("change", () => {
    query.set("estimator", picker.value);
    history.pushState({}, "", `${location.pathname}?${query}`);
    renderGroup(main, groupId);
  });
  const label = (s, i) => `#${i}`;
  fill(main,
    h("h1", {}, "Task group ", h("span", { class: "mono" }, groupId)),
    h("p", { class: "muted" }, `${view.samples.length} samples · advantages: `, picker,
      view.advantages ? " (computed by the trainer's compute_advantages on build_rows, merged layout; failed and running sessions are not trained on)" : ""),
    view.note ? h("p", { class: "error", id: "adv-note" }, view.note) : null,
    h("div", { class: "charts" },
      barChart("reward", view.samples.map((s, i) => ({ label: label(s, i), value: s.session.reward }))),
      view.advantages ? barChart(`advantage (${view.estimator})`, view.samples.map((s, i) => ({ label: label(s, i), value: s.advantage }))) : null),
    h("div", { class: "group-grid", id: "samples" }, view.samples.map((s, i) => sampleCard(s, i, view))));
}

function sampleCard(sample, i, view) {
  const s = sample.session;
  const steps = Object.entries(sample.step_advantages);
  return h("div", { class: "card sample", dataset: { session: s.id, reward: s.reward ?? "", advantage: sample.advantage ?? "" } },
    h("div", { class: "kv" }, h("b", {}, `#${i}`), link(`/sessions/${s.id}`, short(s.id), { class: "mono", title: s.id }), badge(s.status),
      h("span", {}, `policy v${s.policy_version}`), sample.trained ? null : badge("not trained", "abandoned")),
    h("div", { class: "kv" }, h("span", {}, "reward ", h("b", { class: "reward" }, fmt(s.reward))),
      h("span", {}, "return ", h("b", {}, fmt(sample.trajectory_return))), h("span", {}, "steps ", h("b", {}, s.n_steps))),
    h("div", { class: "muted", style: "margin-top:6px;font-size:12px" }, `advantage (${view.estimator})`),
    h("div", { class: "adv" }, signed(sample.advantage)),
    steps.length > 1 ? h("div", { class: "kv" }, steps.map(([k, v]) => h("span", {}, `step ${k} `, signed(v)))) : null,
    sample.final_answer ? h("div", {}, h("div", { class: "muted", style: "font-size:12px;margin-top:6px" }, "final answer"),
      h("div", { class: "answer" }, sample.final_answer)) : null);
}
