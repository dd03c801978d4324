// One message on screen: a user's text (plain), an assistant's answer (markdown) with its
// reasoning and tool calls folded, or a tool's result (folded); re-rendered at most once a
// frame while it streams.

import { fileList } from "./attachments.js";
import { h } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const STATUS_NOTE = {
  queued: "Waiting for a free model slot…",
  sending: "Sending…",
  waiting: "Not sent yet: waiting to retry…",
  cancelled: "Stopped",
  failed: "The answer failed",
  rejected: "Refused",
  reconnecting: "Connection lost; reconnecting…",
};

export class MessageView {
  constructor(message, onRender = () => {}) {
    this.onRender = onRender;
    this.role = message.role;
    this.text = message.content || "";
    this.reasoningText = message.reasoning || "";
    // calls by index: {id, name, arguments}, and for the server's tools {status, result}
    this.calls = [...(message.tool_calls || []), ...(message.tool_steps || [])].map((c) => ({
      id: c.id,
      name: c.function.name,
      arguments: c.function.arguments,
      status: c.status || null,
      result: c.result ?? null,
    }));
    this.frame = 0;
    // dir="auto" + unicode-bidi: isolate (app.css): the text's own direction, and a bidi
    // control in it reorders nothing outside it
    this.content = h("div", {
      class: this.role === "user" ? "content plain" : "content markdown",
      dir: "auto",
    });
    this.note = h("p", { class: "message-note" });
    this.reasoning = h("details", { class: "reasoning", hidden: true }, h("summary", {}, "Reasoning"));
    this.reasoningBody = h("div", { class: "reasoning-text", dir: "auto" });
    this.reasoning.append(this.reasoningBody);
    this.callList = h("div", { class: "tool-calls" });
    this.files = (message.attachments || []).slice(); // a user's sent files; an answer's made files
    this.fileBox = h("div", { class: "files" }, fileList(this.files));
    let body = this.content;
    if (this.role === "tool") {
      const label = message.tool_call_id ? `Tool result (${message.tool_call_id})` : "Tool result";
      body = h("details", { class: "tool-result" }, h("summary", {}, label), this.content);
    }
    const said = { user: "You said:", tool: "A tool answered:" }[this.role] || "parley said:";
    this.el = h(
      "li",
      { class: `message ${this.role}`, dataset: { role: this.role } },
      h("span", { class: "visually-hidden" }, said),
      h("div", { class: "bubble" }, ...this.ordered(body), this.note),
    );
    this.setIds(message);
    this.setStatus(message.status || "completed", message.error ? message.error.message : null);
    if (message.downgraded_from) this.setDowngraded(message.model, message.downgraded_from);
    this.render();
  }

  /** The bubble's parts: a question's files above its text, an answer's below. */
  ordered(body) {
    if (this.role === "user") return [this.fileBox, this.reasoning, this.callList, body];
    return [this.reasoning, this.callList, body, this.fileBox];
  }

  setIds({ id, run_id: runId }) {
    if (id) this.el.dataset.messageId = id;
    if (runId) this.el.dataset.runId = runId;
  }

  get runId() {
    return this.el.dataset.runId || null;
  }

  get streaming() {
    return this.el.dataset.status === "in_progress";
  }

  /** in_progress | queued | sending | waiting | reconnecting | completed | cancelled | failed |
   *  rejected */
  setStatus(status, detail) {
    const live = ["in_progress", "queued", "sending", "waiting", "reconnecting"].includes(status);
    this.el.dataset.status = live ? "in_progress" : status;
    this.el.setAttribute("aria-busy", live ? "true" : "false");
    let note = STATUS_NOTE[status] || "";
    if (status === "queued" && this.text) note = "";
    if (detail) note = note ? `${note}: ${detail}` : detail;
    this.note.textContent = note;
    this.note.hidden = !note;
    this.el.classList.toggle("live", live);
  }

  /** An answer its token limit cut: said under it (Continue, in its actions, goes on). */
  setCut() {
    if (this.el.dataset.status !== "completed") return;
    this.el.dataset.cut = "true";
    this.note.textContent = "Cut off at its length limit.";
    this.note.hidden = false;
  }

  /** Say that a busy service answered with another model than the one asked for. */
  setDowngraded(model, asked) {
    let line = this.el.querySelector(".message-downgrade");
    if (!line) {
      line = h("p", { class: "message-downgrade" });
      this.note.before(line);
    }
    line.textContent = `Answered by ${model}: ${asked} is busy right now.`;
  }

  reset() {
    this.text = "";
    this.schedule();
  }

  /** More of the model's reasoning (shown folded, apart from the answer). */
  appendReasoning(text) {
    this.reasoningText += text;
    this.schedule();
  }

  /** A fragment of a tool call: its id and name come first, then pieces of its arguments. */
  appendCall({ index, id, name, arguments: args }) {
    const call = (this.calls[index] ||= { id: null, name: "", arguments: "", status: null, result: null });
    if (id) call.id = id;
    if (name) call.name = name;
    call.arguments += args || "";
    this.schedule();
  }

  /** A call waits for the user's yes: Allow and Deny under it (``onAnswer`` sends it). */
  askConfirm({ id }) {
    const call = this.calls.find((c) => c && c.id === id);
    if (!call) return;
    call.asking = true;
    this.schedule();
  }

  /** The user's answer reached the run: the buttons go. */
  answered({ id }) {
    const call = this.calls.find((c) => c && c.id === id);
    if (!call) return;
    call.asking = false;
    this.schedule();
  }

  /** A server-side tool ran a call: its status and the start of its result. */
  appendResult({ id, status, preview, files }) {
    const known = new Set(this.files.map((f) => f.id));
    const made = (files || []).filter((f) => !known.has(f.id));
    if (made.length) {
      this.files.push(...made);
      this.fileBox.replaceChildren(...[fileList(this.files)].filter(Boolean));
    }
    const call = this.calls.find((c) => c && c.id === id);
    if (!call) return;
    call.status = status;
    call.result = preview;
    this.schedule();
  }

  append(text, replace) {
    this.text = replace ? text : this.text + text;
    if (this.el.dataset.status === "in_progress" && this.note.textContent) this.setStatus("in_progress");
    this.schedule();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  render() {
    this.renderParts();
    if (this.role === "user" || this.role === "tool") {
      this.content.textContent = this.text;
    } else {
      this.content.replaceChildren(renderMarkdown(this.text));
      if (this.streaming) caretHost(this.content).append(h("span", { class: "cursor", "aria-hidden": "true" }));
    }
    this.onRender();
  }

  renderParts() {
    this.reasoning.hidden = !this.reasoningText;
    this.reasoningBody.textContent = this.reasoningText;
    const open = new Set([...this.callList.querySelectorAll("details[open]")].map((d) => d.dataset.index));
    this.callList.replaceChildren(
      ...this.calls.map((call, index) =>
        h(
          "details",
          { class: "tool-call", dataset: { index: String(index) }, open: open.has(String(index)) || call.asking },
          h("summary", {}, `Called ${call.name || "a tool"}${stepStatus(call, this.streaming)}`),
          h("pre", {}, h("code", {}, call.arguments)),
          call.asking ? this.confirmButtons(call) : null,
          call.result === null ? null : h("pre", { class: "tool-output" }, call.result),
        ),
      ),
    );
  }

  confirmButtons(call) {
    const answer = (approve) => () => {
      call.asking = false;
      this.schedule();
      this.onAnswer?.(call.id, approve);
    };
    return h(
      "p",
      { class: "tool-confirm" },
      `Run ${call.name}? `,
      h("button", { type: "button", class: "primary", onclick: answer(true) }, "Allow"),
      " ",
      h("button", { type: "button", onclick: answer(false) }, "Deny"),
    );
  }

  /** Write out any pending frame now (the stream ended). */
  flush() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.render();
  }
}

/** A server tool's call: how it went, or that it is running (a chat's live answer). */
function stepStatus(call, streaming) {
  if (call.status) return ` · ${call.status}`;
  return streaming ? " · running…" : "";
}

/** Where the typing caret goes: the end of the last paragraph or list item, if any. */
function caretHost(content) {
  let host = content;
  for (let last = host.lastElementChild; last; last = host.lastElementChild) {
    if (["P", "LI", "H3", "H4", "H5", "H6"].includes(last.tagName)) return last;
    if (!["UL", "OL", "BLOCKQUOTE"].includes(last.tagName)) return host;
    host = last;
  }
  return host;
}
