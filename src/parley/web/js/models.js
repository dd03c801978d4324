// The model picker beside the composer: shown when the user may choose among more than one
// model. An opened chat shows the model of its newest answer; a new chat starts with the
// model the user last picked (kept in localStorage); either one only while it is listed.

import { apiGet } from "./api.js";
import { byId, h } from "./dom.js";

const LAST_PICKED = "parley.model";

export class ModelPicker {
  constructor(notices) {
    this.notices = notices;
    this.row = byId("model-row");
    this.select = byId("model");
    this.models = []; // [{id, default, engine}] from /api/models
    this.select.addEventListener("change", () => remember(this.select.value));
  }

  /** Load the models the user may use. Throws only a 401; after another failure the picker
   *  hides and messages name no model (the server's default). */
  async load() {
    let models = [];
    try {
      models = (await apiGet("/api/models")).data;
    } catch (err) {
      if (err.status === 401) throw err;
      this.notices.error(err, "Could not load the models");
    } finally {
      this.show(models);
    }
  }

  show(models) {
    this.models = models;
    this.select.replaceChildren(...models.map((m) => h("option", { value: m.id }, m.id)));
    this.row.hidden = models.length < 2;
    this.choose(null);
  }

  /** The model to send with a message (null: let the server choose). */
  get value() {
    return this.models.length ? this.select.value : null;
  }

  /** The model to continue an answer with: its own while listed, else the one chosen. */
  forAnswer(message) {
    return this.models.some((m) => m.id === message.model) ? message.model : this.value;
  }

  /** A new chat: the model last picked. */
  forNewChat() {
    this.choose(recall());
  }

  /** An opened chat, given a page of its messages newest first: its newest answer's model. */
  forChat(messages) {
    const answer = messages.find((m) => m.role === "assistant" && m.model);
    this.choose(answer ? answer.model : null);
  }

  /** Select `id` if it is listed, else the default (else the first listed). */
  choose(id) {
    const listed = this.models.find((m) => m.id === id) ||
      this.models.find((m) => m.default) ||
      this.models[0];
    if (listed) this.select.value = listed.id;
  }
}

function remember(id) {
  try {
    localStorage.setItem(LAST_PICKED, id);
  } catch {
    // storage refused (a private window, say): the choice lasts for this chat only
  }
}

function recall() {
  try {
    return localStorage.getItem(LAST_PICKED);
  } catch {
    return null;
  }
}
