// The chat list: pinned chats first, then the rest by their last activity in groups (Today,
// Yesterday, Previous 7 days, Previous 30 days, Older), the next page loaded as the user
// scrolls down; or, filtered, the chats the user archived. Each chat: rename in place, pin,
// archive or restore, delete after a confirmation.

import { api, apiGet } from "./api.js";
import { byId, h, isolate } from "./dom.js";
import { icon } from "./icons.js";

const PAGE = 20;
const PINNED_MAX = 100;
const DAY_MS = 86_400_000;

/** The group a chat's last activity puts it in (local days). */
export function groupOf(when, now = new Date()) {
  const today = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const at = Date.parse(when);
  if (at >= today) return "Today";
  if (at >= today - DAY_MS) return "Yesterday";
  if (at >= today - 7 * DAY_MS) return "Previous 7 days";
  if (at >= today - 30 * DAY_MS) return "Previous 30 days";
  return "Older";
}

export class Sidebar {
  /** hooks: {select(chatId), deleted(chatId), renamed(chat)} */
  constructor({ notices, hooks }) {
    this.notices = notices;
    this.hooks = hooks;
    this.scroller = byId("chat-scroll");
    this.list = byId("chat-list");
    this.sentinel = byId("chat-list-sentinel");
    this.status = byId("chat-list-status");
    this.shelfButtons = { false: byId("show-chats"), true: byId("show-archived") };
    this.shelved = false; // showing the chats the user archived
    this.items = new Map(); // chat id → <li>
    this.chats = new Map(); // chat id → its last known JSON
    this.groups = new Map(); // group name → its <ul>
    this.cursor = null;
    this.exhausted = false;
    this.loading = false;
    this.activeId = null;
    this.generation = 0;
    this.shelfButtons.false.addEventListener("click", () => this.showShelf(false));
    this.shelfButtons.true.addEventListener("click", () => this.showShelf(true));
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.loadMore();
    }, { root: this.scroller, rootMargin: "0px 0px 150px 0px" }).observe(this.sentinel);
  }

  showShelf(shelved) {
    if (this.shelved === shelved) return;
    this.shelved = shelved;
    this.shelfButtons.false.setAttribute("aria-pressed", String(!shelved));
    this.shelfButtons.true.setAttribute("aria-pressed", String(shelved));
    this.reset();
  }

  async reset() {
    this.generation += 1;
    this.items.clear();
    this.chats.clear();
    this.groups.clear();
    this.list.replaceChildren();
    this.cursor = null;
    this.exhausted = false;
    this.loading = false;
    if (!this.shelved) await this.loadPinned();
    return this.loadMore();
  }

  async loadPinned() {
    const generation = this.generation;
    try {
      const page = await apiGet(`/api/chats?pinned=true&limit=${PINNED_MAX}`);
      if (generation !== this.generation) return;
      for (const chat of page.data) this.place(chat, "end");
    } catch (err) {
      this.notices.error(err, "Could not load your pinned chats");
    }
  }

  async loadMore() {
    if (this.loading || this.exhausted) return;
    this.loading = true;
    const generation = this.generation;
    this.status.textContent = "Loading chats…";
    try {
      const params = new URLSearchParams({ limit: String(PAGE) });
      if (this.shelved) params.set("shelved", "true");
      if (this.cursor) params.set("cursor", this.cursor);
      const page = await apiGet(`/api/chats?${params}`);
      if (generation !== this.generation) return;
      for (const chat of page.data) if (!this.items.has(chat.id)) this.place(chat, "end");
      this.cursor = page.next_cursor;
      this.exhausted = page.next_cursor === null;
      this.sayEmpty();
    } catch (err) {
      this.status.textContent = "";
      this.notices.error(err, "Could not load your chats");
      return;
    } finally {
      if (generation === this.generation) this.loading = false;
    }
    if (this.sentinelInView()) this.loadMore(); // a short page left the sentinel on screen
  }

  sayEmpty() {
    const none = this.shelved ? "No archived chats." : "No chats yet.";
    this.status.textContent = this.items.size || !this.exhausted ? "" : none;
  }

  sentinelInView() {
    const box = this.scroller.getBoundingClientRect();
    return this.sentinel.getBoundingClientRect().top < box.bottom + 150 && box.height > 0;
  }

  /** The chat's item in its group ("start": newest, at the top of it). */
  place(chat, where) {
    this.chats.set(chat.id, chat);
    const li = this.items.get(chat.id) || this.item(chat);
    const name = chat.pinned_at && !this.shelved ? "Pinned" : groupOf(chat.last_activity_at);
    const group = this.group(name);
    if (where === "start") group.prepend(li);
    else group.append(li);
    this.dropEmptyGroups();
  }

  /** The <ul> of a group, made in its place among the others if it is new. */
  group(name) {
    if (this.groups.has(name)) return this.groups.get(name);
    const order = ["Pinned", "Today", "Yesterday", "Previous 7 days", "Previous 30 days", "Older"];
    const id = `chat-group-${order.indexOf(name)}`;
    const ul = h("ul", { "aria-labelledby": id });
    const box = h("li", { class: "chat-group", dataset: { group: name } }, h("h2", { class: "chat-group-title", id }, name), ul);
    const after = [...this.list.children].find((g) => order.indexOf(g.dataset.group) > order.indexOf(name));
    this.list.insertBefore(box, after || null);
    this.groups.set(name, ul);
    return ul;
  }

  dropEmptyGroups() {
    for (const [name, ul] of this.groups) {
      if (ul.children.length) continue;
      ul.parentElement.remove();
      this.groups.delete(name);
    }
  }

  item(chat) {
    const link = h("a", {
      href: `/c/${encodeURIComponent(chat.id)}`, class: "chat-link", dir: "auto",
    }, chat.title);
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.hooks.select(chat.id);
    });
    if (chat.archived_at) link.title = "Stored compactly (idle for long): opens a little slower";
    const li = h(
      "li",
      { class: chat.archived_at ? "chat-item archived" : "chat-item", dataset: { chatId: chat.id } },
      link,
      h("span", { class: "chat-actions" }, ...this.actions(chat)),
    );
    this.items.set(chat.id, li);
    if (chat.id === this.activeId) this.mark(li, true);
    return li;
  }

  actions(chat) {
    const button = (cls, text, label, onclick) =>
      h("button", { type: "button", class: `icon ${cls}`, title: label, "aria-label": `${label} “${chat.title}”`, onclick }, text);
    const pinned = Boolean(chat.pinned_at);
    const shelved = Boolean(chat.shelved_at);
    return [
      button("rename", "✎", "Rename chat", () => this.rename(chat.id)),
      shelved ? null : button(pinned ? "pin pinned" : "pin", icon("pin"), pinned ? "Unpin chat" : "Pin chat", () => this.change(chat.id, { pinned: !pinned })),
      button("shelve", icon(shelved ? "restore" : "archive"), shelved ? "Restore chat" : "Archive chat", () => this.change(chat.id, { shelved: !shelved })),
      button("delete", "✕", "Delete chat", () => this.remove(chat.id)),
    ];
  }

  /** Pin, unpin, archive or restore: the chat moves to where it now belongs (or leaves). */
  async change(chatId, json) {
    try {
      const chat = await api("PATCH", `/api/chats/${encodeURIComponent(chatId)}`, { json });
      const li = this.items.get(chatId);
      this.items.delete(chatId);
      const focused = li && li.contains(document.activeElement);
      li?.remove();
      if (Boolean(chat.shelved_at) === this.shelved) this.place(chat, "start");
      this.dropEmptyGroups();
      this.sayEmpty();
      const now = this.items.get(chatId);
      if (focused) (now ? now.querySelector(".chat-link") : byId("new-chat")).focus();
    } catch (err) {
      this.notices.error(err, "Could not change the chat");
    }
  }

  setActive(chatId) {
    const old = this.items.get(this.activeId);
    if (old) this.mark(old, false);
    this.activeId = chatId;
    const now = this.items.get(chatId);
    if (now) this.mark(now, true);
  }

  mark(li, active) {
    li.classList.toggle("active", active);
    const link = li.querySelector(".chat-link");
    if (active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }

  /** A chat was created or had activity: it moves to the top of its group. */
  touch(chat) {
    if (this.shelved && !chat.shelved_at) return;
    const known = this.chats.get(chat.id);
    this.place({ ...known, ...chat, last_activity_at: new Date().toISOString() }, "start");
    this.status.textContent = "";
  }

  touchId(chatId) {
    const known = this.chats.get(chatId);
    if (known) this.touch(known);
  }

  setTitle(chatId, title) {
    const li = this.items.get(chatId);
    if (!li) return;
    this.chats.set(chatId, { ...this.chats.get(chatId), title });
    li.querySelector(".chat-link").textContent = title;
    for (const b of li.querySelectorAll(".chat-actions button")) {
      b.setAttribute("aria-label", `${b.title} “${title}”`);
    }
  }

  rename(chatId) {
    const li = this.items.get(chatId);
    const link = li.querySelector(".chat-link");
    const input = h("input", {
      type: "text", class: "rename-input", value: link.textContent, dir: "auto",
      "aria-label": "New chat title", maxlength: "200",
    });
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      input.replaceWith(link);
      if (!save || !title || title === link.textContent) return link.focus();
      try {
        const chat = await api("PATCH", `/api/chats/${encodeURIComponent(chatId)}`, {
          json: { title },
        });
        this.setTitle(chatId, chat.title);
        this.hooks.renamed(chat);
      } catch (err) {
        this.notices.error(err, "Could not rename the chat");
      }
      link.focus();
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") finish(true);
      if (event.key === "Escape") {
        event.preventDefault(); // (the drawer stays open)
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
    link.replaceWith(input);
    input.focus();
    input.select();
  }

  async remove(chatId) {
    const li = this.items.get(chatId);
    const title = li.querySelector(".chat-link").textContent;
    if (!window.confirm(`Delete “${isolate(title)}” and all its messages?`)) return;
    try {
      await api("DELETE", `/api/chats/${encodeURIComponent(chatId)}`);
    } catch (err) {
      if (err.status !== 404) return this.notices.error(err, "Could not delete the chat");
    }
    li.remove();
    this.items.delete(chatId);
    this.chats.delete(chatId);
    this.dropEmptyGroups();
    this.sayEmpty();
    this.hooks.deleted(chatId);
  }
}
