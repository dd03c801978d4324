// The tool picker beside the composer: which of the server's tools (those the user's tier
// allows) the next answer may call. A choice per chat, kept in localStorage; a new chat
// starts with the choice last made for a new chat. An MCP server that acts as the user
// shows "Connect" until they have connected it (the browser goes to its sign-in and comes
// back to /?connected=<server>), then "Disconnect".

import { api, apiGet } from "./api.js";
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
      this.tools = (await apiGet("/api/tools")).data;
    } catch (err) {
      if (err.status === 401) throw err;
      this.tools = [];
    }
    this.allowed = this.tools.map((t) => t.name);
    this.render();
  }

  /** What a return from an MCP server's sign-in says (then taken off the address). */
  arrived() {
    const query = new URLSearchParams(window.location.search);
    const connected = query.get("connected");
    const failed = query.get("connect_error");
    if (!connected && !failed) return;
    if (failed) this.notices.error(new Error(failed), "Could not connect");
    window.history.replaceState(null, "", window.location.pathname);
  }

  async connect(server) {
    try {
      const { authorization_url: url } = await api("POST", `/api/tools/mcp/${encodeURIComponent(server)}/connect`);
      window.location.assign(url);
    } catch (err) {
      this.notices.error(err, `Could not connect ${server}`);
    }
  }

  async disconnect(server) {
    try {
      await api("DELETE", `/api/tools/mcp/${encodeURIComponent(server)}/connection`);
      await this.load();
    } catch (err) {
      this.notices.error(err, `Could not disconnect ${server}`);
    }
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
    this.list.replaceChildren(...(this.tools || []).map((tool) => this.choice(tool, chosen)));
    this.row.hidden = this.allowed.length === 0;
  }

  choice({ name, connection }, chosen) {
    const server = name.startsWith("mcp:") ? name.slice(4) : null;
    const missing = connection === "not_connected";
    const label = h(
      "label",
      { class: "tool-choice" },
      h("input", {
        type: "checkbox",
        value: name,
        checked: chosen.has(name) && !missing,
        disabled: missing,
        onchange: () => save(this.chatId, this.value),
      }),
      ` ${LABELS[name] || (server ? `MCP: ${server}` : name)}`,
    );
    if (connection === "none") return label;
    const action = missing
      ? h("button", { type: "button", class: "link tool-connect", onclick: () => this.connect(server) }, "Connect")
      : h("button", { type: "button", class: "link tool-disconnect", onclick: () => this.disconnect(server) }, "Disconnect");
    return h("span", { class: "tool-choice-row" }, label, " ", action);
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
