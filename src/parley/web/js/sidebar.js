// The chat list: newest activity first, the next page loaded as the user scrolls down;
// rename in place, delete after a confirmation.

import { api, apiGet } from "./api.js";
import { byId, h, isolate } from "./dom.js";

const PAGE = 20;

export class Sidebar {
  /** hooks: {select(chatId), deleted(chatId)} */
  constructor({ notices, hooks }) {
    this.notices = notices;
    this.hooks = hooks;
    this.scroller = byId("chat-scroll");
    this.list = byId("chat-list");
    this.sentinel = byId("chat-list-sentinel");
    this.status = byId("chat-list-status");
    this.items = new Map(); // chat id → <li>
    this.cursor = null;
    this.exhausted = false;
    this.loading = false;
    this.activeId = null;
    this.generation = 0;
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.loadMore();
    }, { root: this.scroller, rootMargin: "0px 0px 150px 0px" }).observe(this.sentinel);
  }

  reset() {
    this.generation += 1;
    this.items.clear();
    this.list.replaceChildren();
    this.cursor = null;
    this.exhausted = false;
    this.loading = false;
    return this.loadMore();
  }

  async loadMore() {
    if (this.loading || this.exhausted) return;
    this.loading = true;
    const generation = this.generation;
    this.status.textContent = "Loading chats…";
    try {
      const params = new URLSearchParams({ limit: String(PAGE) });
      if (this.cursor) params.set("cursor", this.cursor);
      const page = await apiGet(`/api/chats?${params}`);
      if (generation !== this.generation) return;
      for (const chat of page.data) if (!this.items.has(chat.id)) this.list.append(this.item(chat));
      this.cursor = page.next_cursor;
      this.exhausted = page.next_cursor === null;
      this.status.textContent = this.items.size ? "" : "No chats yet.";
    } catch (err) {
      this.status.textContent = "";
      this.notices.error(err, "Could not load your chats");
      return;
    } finally {
      if (generation === this.generation) this.loading = false;
    }
    if (this.sentinelInView()) this.loadMore(); // a short page left the sentinel on screen
  }

  sentinelInView() {
    const box = this.scroller.getBoundingClientRect();
    return this.sentinel.getBoundingClientRect().top < box.bottom + 150 && box.height > 0;
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
    if (chat.archived_at) link.title = "Archived: reads as before; a new message brings it back";
    const li = h(
      "li",
      { class: chat.archived_at ? "chat-item archived" : "chat-item", dataset: { chatId: chat.id } },
      link,
      h("span", { class: "chat-actions" },
        h("button", {
          type: "button", class: "icon rename", title: "Rename",
          "aria-label": `Rename chat “${chat.title}”`, onclick: () => this.rename(chat.id),
        }, "✎"),
        h("button", {
          type: "button", class: "icon delete", title: "Delete",
          "aria-label": `Delete chat “${chat.title}”`, onclick: () => this.remove(chat.id),
        }, "✕"),
      ),
    );
    this.items.set(chat.id, li);
    if (chat.id === this.activeId) this.mark(li, true);
    return li;
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

  /** A chat was created or had activity: it moves to the top. */
  touch(chat) {
    const li = this.items.get(chat.id) || this.item(chat);
    this.list.prepend(li);
    this.status.textContent = "";
  }

  touchId(chatId) {
    const li = this.items.get(chatId);
    if (li) this.list.prepend(li);
  }

  setTitle(chatId, title) {
    const li = this.items.get(chatId);
    if (!li) return;
    li.querySelector(".chat-link").textContent = title;
    li.querySelector(".rename").setAttribute("aria-label", `Rename chat “${title}”`);
    li.querySelector(".delete").setAttribute("aria-label", `Delete chat “${title}”`);
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
      if (event.key === "Escape") finish(false);
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
    if (!this.items.size && this.exhausted) this.status.textContent = "No chats yet.";
    this.hooks.deleted(chatId);
  }
}
