// Shared links: publish a read-only snapshot of the open chat (a new link each time), show
// and copy it; list the user's links and revoke them. The link's page is /s/<token>,
// served by the server without this app.

import { api, apiGet } from "./api.js";
import { byId, h } from "./dom.js";

export class SharesPanel {
  /** chatId(): the open chat's id, or null. */
  constructor({ notices, chatId }) {
    this.notices = notices;
    this.chatId = chatId;
    this.panel = byId("share-panel");
    this.list = byId("share-list");
    this.listStatus = byId("share-list-status");
    this.url = byId("share-url");
    this.button = byId("share-chat");
    this.button.addEventListener("click", () => this.share());
    byId("shared-links").addEventListener("click", () => this.open());
    byId("share-close").addEventListener("click", () => this.close());
    byId("share-copy").addEventListener("click", () => this.copy());
  }

  /** The open chat changed (null: none, nothing to share). */
  setChat(chatId) {
    this.button.hidden = chatId === null;
  }

  async share() {
    const chatId = this.chatId();
    if (!chatId) return;
    this.button.disabled = true;
    try {
      const share = await api("POST", `/api/chats/${encodeURIComponent(chatId)}/shares`);
      this.url.value = new URL(share.url, window.location.origin).href;
      byId("share-new").hidden = false;
      await this.open();
      this.url.select();
    } catch (err) {
      this.notices.error(err, "Could not share the chat");
    } finally {
      this.button.disabled = false;
    }
  }

  async copy() {
    try {
      await navigator.clipboard.writeText(this.url.value);
      byId("share-copy").textContent = "Copied";
    } catch {
      this.url.select(); // no clipboard (plain http): selected for the user to copy
    }
  }

  async open() {
    this.panel.hidden = false;
    byId("share-copy").textContent = "Copy";
    await this.load();
  }

  close() {
    this.panel.hidden = true;
    byId("share-new").hidden = true;
  }

  async load() {
    this.listStatus.textContent = "Loading…";
    try {
      const { data } = await apiGet("/api/shares");
      this.list.replaceChildren(...data.map((share) => this.item(share)));
      this.listStatus.textContent = data.length ? "" : "You have not shared any chat.";
    } catch (err) {
      this.listStatus.textContent = "";
      this.notices.error(err, "Could not list your shared links");
    }
  }

  item(share) {
    const href = new URL(share.url, window.location.origin).href;
    const when = new Date(share.created_at).toLocaleString();
    return h(
      "li",
      { class: "share-item", dataset: { shareId: share.id } },
      h("a", { href, target: "_blank", rel: "noopener", class: "share-title", dir: "auto" },
        share.title),
      h("span", { class: "share-meta" }, `${share.message_count} messages · ${when}`),
      h("button", { type: "button", class: "link danger", onclick: () => this.revoke(share, href) },
        "Revoke"),
    );
  }

  async revoke(share, href) {
    try {
      await api("DELETE", `/api/shares/${encodeURIComponent(share.id)}`);
    } catch (err) {
      if (err.status !== 404) return this.notices.error(err, "Could not revoke the link");
    }
    if (this.url.value === href) byId("share-new").hidden = true;
    await this.load();
  }
}
