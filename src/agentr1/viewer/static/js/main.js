// Client-side routing: the server answers every page path with the same shell; this picks the view.
import { renderChat } from "./chat.js";
import { renderGroup } from "./group.js";
import { renderRun, renderRuns } from "./runs.js";
import { renderSession } from "./session.js";
import { errorBox, h, fill } from "./util.js";

const ROUTES = [
  [/^\/$/, (main) => renderRuns(main), "runs"],
  [/^\/runs\/(.+)$/, (main, m) => renderRun(main, decodeURIComponent(m[1])), "runs"],
  [/^\/sessions\/([^/]+)$/, (main, m) => renderSession(main, decodeURIComponent(m[1])), "runs"],
  [/^\/groups\/(.+)$/, (main, m) => renderGroup(main, decodeURIComponent(m[1])), "runs"],
  [/^\/chat$/, (main) => renderChat(main), "chat"],
];

async function route() {
  const main = document.getElementById("app");
  main.dataset.ready = "false";
  for (const [pattern, render, nav] of ROUTES) {
    const m = location.pathname.match(pattern);
    if (!m) continue;
    document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
    try {
      await render(main, m);
    } catch (err) {
      fill(main, errorBox(err));
    }
    main.dataset.ready = "true";
    return;
  }
  fill(main, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "/" }, "back to the runs")));
  main.dataset.ready = "true";
}

window.addEventListener("popstate", route);
route();
