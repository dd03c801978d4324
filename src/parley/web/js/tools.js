// The tool picker beside the composer: which of the server's tools (those the user's tier
// allows) the next answer may call. A choice per chat, kept in localStorage; a new chat
// starts with the choice last made for a new chat.

import { apiGet } from "./api.js";
import { byId, h } from "./dom.js";

const LABELS = {
  search_chats: "Search my chats",
  read_message: "Read my messages",
  fetch_url: "Fetch web pages",
  run_python: "Run Python",
};
const NEW_CHAT = "new";

export class ToolPicker {
  constructor(notices) {
    this.notices = notices;
    this.row = byId("tool-row");
    this.list = byId("tool-list");
    this.allowed = [];
    this.chatId = NEW_CHAT;
  }

  /** Load the tools the user's tier allows; after a failure the picker hides. */
  async load() {
    try {
      this.allowed = (await apiGet("/api/me")).tier.tools || [];
    } catch (err) {
      if (err.status === 401) throw err;
      this.allowed = [];
    }
    this.render();
  }

  /** The chat the composer sends to now (null: a new chat). */
  forChat(chatId) {
    this.chatId = chatId || NEW_CHAT;
    this.render();
  }

  /** A new chat was made with the choice the composer had: it keeps that choice. */
  chatCreated(chatId) {
    save(chatId, this.value);
    this.chatId = chatId;
  }

  /** The tools the next answer may call. */
  get value() {
    return [...this.list.querySelectorAll("input:checked")].map((box) => box.value);
  }

  render() {
    const chosen = new Set(load(this.chatId));
    this.list.replaceChildren(
      ...this.allowed.map((name) =>
        h(
          "label",
          { class: "tool-choice" },
          h("input", {
            type: "checkbox",
            value: name,
            checked: chosen.has(name),
            onchange: () => save(this.chatId, this.value),
          }),
          ` ${LABELS[name] || (name.startsWith("mcp:") ? `MCP: ${name.slice(4)}` : name)}`,
        ),
      ),
    );
    this.row.hidden = this.allowed.length === 0;
  }
}

function save(chatId, tools) {
  try {
    localStorage.setItem(`parley.tools.${chatId}`, JSON.stringify(tools));
  } catch {
    // storage refused: the choice lasts while the page does
  }
}

function load(chatId) {
  try {
    return JSON.parse(localStorage.getItem(`parley.tools.${chatId}`) || "[]");
  } catch {
    return [];
  }
}
