// Search across all of the user's chats (GET /api/search): a box at the top of the sidebar,
// results in place of the chat list with their snippets' matched words in <mark>, built
// from text nodes only; a result opens its chat at /c/<chat>#m-<message> and
// revealMessage() scrolls to that message and marks it.

import { apiGet } from "./api.js";
import { byId, h, show } from "./dom.js";

const PAGE = 20;
const DEBOUNCE_MS = 250;
const MAX_OLDER_PAGES = 200; // how far back revealMessage pages for a message
export const MESSAGE_HASH = /^#m-([A-Za-z0-9_]+)$/;

/** A snippet as text nodes, its highlights ([start, end) in code points) in <mark>s. */
export function snippetNodes(snippet, highlights) {
  const chars = Array.from(snippet);
  const nodes = [];
  let at = 0;
  for (const [start, end] of [...highlights].sort((a, b) => a[0] - b[0])) {
    if (start < at || end <= start || end > chars.length) continue;
    if (start > at) nodes.push(document.createTextNode(chars.slice(at, start).join("")));
    nodes.push(h("mark", {}, chars.slice(start, end).join("")));
    at = end;
  }
  if (at < chars.length) nodes.push(document.createTextNode(chars.slice(at).join("")));
  return nodes;
}

export class SearchBox {
  /** hooks: {open(chatId, messageId | null)} */
  constructor({ notices, hooks }) {
    this.notices = notices;
    this.hooks = hooks;
    this.input = byId("search-input");
    this.panel = byId("search-results");
    this.list = byId("search-list");
    this.status = byId("search-status");
    this.more = byId("search-more");
    this.chats = byId("chat-scroll");
    this.query = "";
    this.cursor = null;
    this.generation = 0;
    this.timer = null;
    this.input.addEventListener("input", () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.search(this.input.value), DEBOUNCE_MS);
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        clearTimeout(this.timer);
        this.search(this.input.value);
      }
      if (event.key === "Escape") this.clear();
    });
    byId("search").addEventListener("submit", (event) => event.preventDefault());
    this.more.addEventListener("click", () => this.load());
  }

  clear() {
    this.input.value = "";
    this.search("");
  }

  search(query) {
    this.query = query.trim();
    this.generation += 1;
    this.cursor = null;
    this.list.replaceChildren();
    show(this.more, false);
    show(this.panel, Boolean(this.query));
    show(this.chats, !this.query);
    this.status.textContent = "";
    if (this.query) return this.load();
  }

  async load() {
    const generation = this.generation;
    const params = new URLSearchParams({ q: this.query, limit: String(PAGE) });
    if (this.cursor) params.set("cursor", this.cursor);
    this.status.textContent = "Searching…";
    show(this.more, false);
    let page;
    try {
      page = await apiGet(`/api/search?${params}`);
    } catch (err) {
      if (generation !== this.generation) return;
      if (err.status === 400) {
        this.status.textContent = err.message; // nothing to search for, or too long
        return;
      }
      this.status.textContent = "";
      return this.notices.error(err, "Could not search your chats");
    }
    if (generation !== this.generation) return;
    this.list.append(...page.data.map((hit) => this.item(hit)));
    this.cursor = page.next_cursor;
    show(this.more, Boolean(page.next_cursor));
    this.status.textContent = this.list.children.length ? "" : "No chats match.";
  }

  item(hit) {
    const hash = hit.message_id ? `#m-${hit.message_id}` : "";
    const link = h("a", {
      href: `/c/${encodeURIComponent(hit.chat_id)}${hash}`, class: "search-link", dir: "auto",
    },
      h("span", { class: "search-title" }, hit.chat_title),
      h("span", { class: "search-snippet" }, ...snippetNodes(hit.snippet, hit.highlights)),
      hit.archived ? h("span", { class: "search-note" }, "Archived: title only, its messages are not searched") : null,
    );
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.hooks.open(hit.chat_id, hit.message_id);
    });
    return h("li", { class: "search-item", dataset: { chatId: hit.chat_id } }, link);
  }
}

/** Scroll the open chat to the message with this id, paging back through older messages
 *  until it shows, and mark it; false if it is not on the branch shown. */
export async function revealMessage(conversation, messageId) {
  const selector = `li[data-message-id="${CSS.escape(messageId)}"]`;
  const chatId = conversation.chatId;
  for (let pages = 0; pages <= MAX_OLDER_PAGES; pages++) {
    if (conversation.chatId !== chatId) return false; // another chat was opened meanwhile
    const li = conversation.list.querySelector(selector);
    if (li) {
      conversation.stick = false;
      li.classList.add("search-hit");
      li.scrollIntoView({ block: "center" });
      return true;
    }
    while (conversation.loadingOlder) await new Promise((done) => setTimeout(done, 50));
    if (!conversation.cursor) return false;
    await conversation.loadOlder();
  }
  return false;
}
