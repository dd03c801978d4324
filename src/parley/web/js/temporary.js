// Temporary chats: the conversation lives in this page alone. Each message sends it whole
// (POST /api/temporary/messages); the server keeps none of its text, and a reload, another
// chat or a new one ends it.

import { send } from "./api.js";
import { byId } from "./dom.js";

/** The turns of a temporary chat, and its switch in the top bar. */
export class TemporaryChat {
  constructor(onToggle) {
    this.turns = null; // null: not a temporary chat; else [{role, content}], oldest first
    this.button = byId("temporary-toggle");
    this.note = byId("temporary-note");
    this.button.addEventListener("click", () => onToggle(this.turns === null));
  }

  get on() {
    return this.turns !== null;
  }

  /** Begin (true) or leave (false) a temporary chat: nothing of an old one is kept. */
  set(on) {
    this.turns = on ? [] : null;
    this.button.setAttribute("aria-pressed", String(on));
    this.note.hidden = !on;
    document.body.classList.toggle("temporary", on);
  }

  /** The switch is offered on a new chat with nothing in it yet. */
  offer(shown) {
    this.button.hidden = !shown;
  }

  /** The POST of the conversation with `text` as its new message (model null: default). */
  post(text, model, key, signal) {
    const messages = [...this.turns, { role: "user", content: text }];
    return send("POST", "/api/temporary/messages", {
      json: model ? { messages, model } : { messages },
      headers: { "Idempotency-Key": key },
      accept: "text/event-stream",
      signal,
    });
  }

  /** A message answered: both join the conversation (an answer with no text: the question
   *  alone, so that the next message still carries it). */
  answered(text, answer) {
    this.turns.push({ role: "user", content: text });
    if (answer) this.turns.push({ role: "assistant", content: answer });
  }
}
