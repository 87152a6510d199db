// A session's branch tree: each branch with the step it forks from and its own steps, nested under the
// branch it forks off. Selecting a branch shows only the steps of its path (the shared steps it continues,
// then its own) and the training rows made of them; the choice lives in the URL (?branch=N).
import { badge, h } from "./util.js";

const KIND = { root: "new conversation", fork: "fork", drift: "history rewritten" };

export function branchTree(detail, main) {
  const branches = detail.branches;
  if (branches.length < 2 && !detail.superseded_steps.length) return null;
  const byId = new Map(branches.map((b) => [b.id, b]));
  const node = (b) => h("li", { class: "branch", dataset: { branch: b.id, kind: b.kind, steps: b.steps.join(","),
      parentStep: b.parent_step ?? "", path: b.path.join(",") } },
    h("button", { type: "button", class: "secondary branch-select", onclick: () => selectBranch(main, detail, b.id) },
      `branch ${b.id}`),
    " ", badge(KIND[b.kind], b.kind === "drift" ? "drift" : ""),
    b.parent_step !== null ? h("span", { class: "muted" }, ` forks from step ${b.parent_step}`) : null,
    h("span", {}, " · steps ", h("b", {}, b.steps.join(", "))),
    b.children.length ? h("ul", {}, b.children.map((c) => node(byId.get(c)))) : null);
  const roots = branches.filter((b) => b.parent_branch === null);
  return h("section", { class: "card", id: "branches" },
    h("div", { class: "head" }, h("h2", {}, `${branches.length} branches`), " ",
      h("button", { type: "button", class: "secondary branch-select", id: "branch-all",
        onclick: () => selectBranch(main, detail, null) }, "all steps")),
    h("p", { class: "muted" }, "A branch is a line of calls each continuing the previous one token for token; a " +
      "call that continues an earlier step (a retry with an edited history, a sub-agent) starts a new one. " +
      "The trainer trains each branch's own steps; the steps before its fork are its prompt."),
    h("ul", { class: "branch-tree" }, roots.map(node)),
    detail.superseded_steps.length ? h("p", { class: "muted", id: "superseded" },
      `superseded by a client retry (not trained): steps ${detail.superseded_steps.join(", ")}`) : null,
    h("p", { id: "branch-note", class: "muted" }));
}

export function selectBranch(main, detail, id, { push = true } = {}) {
  const branch = detail.branches.find((b) => b.id === id) || null;
  main.dataset.branch = branch ? branch.id : "";
  const path = new Set(branch ? branch.path : []);
  const own = new Set(branch ? branch.steps : []);
  main.querySelectorAll("#branches .branch").forEach((li) =>
    li.classList.toggle("active", branch !== null && Number(li.dataset.branch) === branch.id));
  main.querySelector("#branch-all")?.classList.toggle("active", branch === null);
  main.querySelectorAll("section.step").forEach((card) => {
    const index = Number(card.dataset.step);
    card.hidden = branch !== null && !path.has(index);
    card.classList.toggle("shared", branch !== null && path.has(index) && !own.has(index));
  });
  filterRows(main);
  const note = main.querySelector("#branch-note");
  if (note) {
    const shared = branch ? branch.path.filter((i) => !own.has(i)) : [];
    note.textContent = !branch ? "showing every step" : `showing branch ${branch.id}: steps ${branch.path.join(" → ")}` +
      (shared.length ? ` (steps ${shared.join(", ")} shared with branch ${branch.parent_branch})` : "");
  }
  if (push) {
    const url = new URL(location.href);
    if (branch) url.searchParams.set("branch", branch.id);
    else url.searchParams.delete("branch");
    history.replaceState(null, "", url);
  }
}

// Training rows outside the selected branch are hidden: a row whose steps are all on the branch's path.
export function filterRows(main) {
  const id = main.dataset.branch;
  const path = id ? new Set(main.querySelector(`#branches .branch[data-branch="${id}"]`).dataset.path.split(",")) : null;
  main.querySelectorAll("#rows .row").forEach((row) => {
    row.hidden = path !== null && !row.dataset.steps.split(",").every((s) => path.has(s));
  });
}
