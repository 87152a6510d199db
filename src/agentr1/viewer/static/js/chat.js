// Chat with the policy through the gateway (--gateway URL): each model call is a recorded step.
import { api, errorBox, h, link, messageView, post, setCrumbs, fill } from "./util.js";

export async function renderChat(main) {
  setCrumbs("chat");
  const [config, tools] = await Promise.all([api("/config"), api("/chat/tools")]);
  if (!config.gateway_url) {
    fill(main, h("h1", {}, "Chat"), errorBox("No gateway configured: start the viewer with `agentr1 view --gateway http://127.0.0.1:8000`."));
    return;
  }
  const state = { session: null, apiKey: null, messages: [] };
  const transcript = h("div", { class: "transcript", id: "transcript" }, h("p", { class: "muted" }, "Say something to the policy."));
  const sessionLine = h("div", { id: "chat-session", class: "muted" }, "no session yet: the first message starts one");
  const toolBoxes = tools.map((t) => h("label", {}, h("input", { type: "checkbox", name: "tool", value: t }), ` ${t}`));
  const maxTokens = h("input", { type: "number", value: 256, min: 1, style: "width:80px", id: "max-tokens" });
  const temperature = h("input", { type: "number", value: 0.7, step: 0.1, min: 0, style: "width:70px", id: "temperature" });
  const system = h("input", { placeholder: "system prompt (optional)", size: 40, id: "system" });
  const input = h("textarea", { id: "chat-input", placeholder: "message (Enter sends, Shift+Enter for a new line)" });
  const send = h("button", { type: "submit", id: "chat-send" }, "send");
  const reset = h("button", { type: "button", class: "secondary", id: "chat-reset" }, "new session");
  const form = h("form", {}, input, send);

  const show = (m, steps = []) => {
    if (!state.messages.length || transcript.querySelector("p.muted")) fill(transcript);
    const view = messageView(m);
    if (steps.length) view.append(h("div", { class: "muted", style: "font-size:11px" }, "recorded as ",
      steps.map((k) => link(`/sessions/${state.session}#step-${k}`, `step ${k}`, { class: "step-link" }))));
    transcript.append(view);
    transcript.scrollTop = transcript.scrollHeight;
  };
  const startSession = async () => {
    const created = await post("/chat/sessions", { run_id: "chat" });
    state.session = created.id;
    state.apiKey = created.api_key;
    state.messages = system.value ? [{ role: "system", content: system.value }] : [];
    fill(sessionLine, "session ", link(created.link, created.id, { class: "mono", id: "chat-session-link" }),
      " (run chat) — every model call is a step of it");
  };
  reset.addEventListener("click", () => {
    state.session = null;
    state.messages = [];
    fill(transcript, h("p", { class: "muted" }, "New conversation."));
    sessionLine.textContent = "no session yet: the first message starts one";
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    send.disabled = true;
    try {
      if (!state.session) await startSession();
      const user = { role: "user", content: text };
      state.messages.push(user);
      show(user);
      input.value = "";
      const result = await post("/chat/turn", {
        session_id: state.session, api_key: state.apiKey, messages: state.messages,
        tools: toolBoxes.map((l) => l.querySelector("input")).filter((b) => b.checked).map((b) => b.value),
        max_tokens: Number(maxTokens.value) || 256, temperature: Number(temperature.value),
      });
      let k = 0;
      for (const m of result.messages) {
        state.messages.push(m);
        show(m, m.role === "assistant" && k < result.steps.length ? [result.steps[k++]] : []);
      }
    } catch (err) {
      transcript.append(errorBox(err));
    } finally {
      send.disabled = false;
      input.focus();
    }
  });
  fill(main, h("h1", {}, "Chat with the policy"),
    h("div", { class: "chat" },
      h("div", { class: "toolbar" }, h("span", { class: "muted mono" }, `gateway ${config.gateway_url}`),
        tools.length ? h("span", {}, "tools: ", toolBoxes) : null,
        h("label", {}, "max tokens ", maxTokens), h("label", {}, "temperature ", temperature), reset),
      h("div", { class: "toolbar" }, system),
      sessionLine, transcript, form));
  input.focus();
}
