// Files sent with a message: the attach button by the composer, the chips of the files
// waiting to be sent (name, size, a remove "×"), their uploads (POST
// /api/chats/{id}/attachments, the file as the body), and the files shown on a sent message.

import { api, apiGet } from "./api.js";
import { byId, h } from "./dom.js";

const ACCEPT = ".txt,.md,.markdown,.pdf,.py,.js,.mjs,.ts,.json,.html,.css,.c,.h,.cpp,.java," +
  ".go,.rs,.rb,.sh,.sql,.yaml,.yml,.toml,.csv,.xml,text/*,application/pdf";

export function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** The files on a sent message (from the messages list, or as they were sent). */
export function fileList(files) {
  if (!files || !files.length) return null;
  return h(
    "ul",
    { class: "message-files", "aria-label": "Attached files" },
    files.map((f) =>
      h("li", { class: "file-chip", dataset: { attachmentId: f.id }, title: f.media_type },
        h("a", { class: "file-name", href: `/api/attachments/${encodeURIComponent(f.id)}/content`, download: f.name }, f.name),
        h("span", { class: "file-size" }, size(f.size))),
    ),
  );
}

export class AttachmentTray {
  /** ensureChat(): the open chat's id, made first if there is none. */
  constructor({ notices, ensureChat }) {
    this.notices = notices;
    this.ensureChat = ensureChat;
    this.files = []; // uploaded, waiting to be sent: {id, name, size, media_type}
    this.uploading = 0;
    this.input = h("input", {
      type: "file", id: "attach-input", class: "visually-hidden", multiple: true,
      accept: ACCEPT, tabindex: "-1", "aria-hidden": "true",
      onchange: () => this.upload(Array.from(this.input.files)),
    });
    this.button = h("button", {
      type: "button", id: "attach", class: "attach", "aria-label": "Attach files",
      title: "Attach files (text, Markdown, source code, PDF)", onclick: () => this.input.click(),
    }, "+");
    this.chips = h("ul", { id: "attachment-chips", class: "attachment-chips", "aria-label": "Files to send" });
    this.chips.hidden = true;
    const form = byId("composer");
    form.before(this.chips);
    byId("prompt").before(this.button);
    form.append(this.input);
  }

  /** The ids to send with the next message (fixed when it is sent). */
  get ids() {
    return this.files.map((f) => f.id);
  }

  get busy() {
    return this.uploading > 0;
  }

  /** Another chat opened: its files still waiting for a message show again. */
  async open(chatId) {
    const opened = (this.opened = (this.opened || 0) + 1);
    this.files = [];
    this.render();
    if (chatId === null) return;
    try {
      const listed = await apiGet(`/api/chats/${encodeURIComponent(chatId)}/attachments`);
      if (opened !== this.opened) return; // another chat opened meanwhile
      const shown = new Set(this.files.map((f) => f.id));
      this.files.push(...listed.data.filter((f) => f.message_id === null && !shown.has(f.id)));
      this.render();
    } catch (err) {
      if (err.status !== 404) this.notices.error(err, "Could not list the chat's files");
    }
  }

  /** The message went with these files: they are on it now. */
  sent(ids) {
    this.files = this.files.filter((f) => !ids.includes(f.id));
    this.render();
  }

  async upload(files) {
    this.input.value = "";
    if (!files.length) return;
    this.uploading += 1;
    this.button.disabled = true;
    try {
      const chatId = await this.ensureChat();
      if (chatId === null) return;
      for (const file of files) {
        const path = `/api/chats/${encodeURIComponent(chatId)}/attachments?filename=${encodeURIComponent(file.name)}`;
        try {
          this.files.push(await api("POST", path, { body: file }));
          this.render();
        } catch (err) {
          this.notices.error(err, `Could not attach ${file.name}`);
        }
      }
    } catch (err) {
      this.notices.error(err, "Could not attach the files");
    } finally {
      this.uploading -= 1;
      this.button.disabled = false;
    }
  }

  async remove(file) {
    try {
      await api("DELETE", `/api/attachments/${encodeURIComponent(file.id)}`);
    } catch (err) {
      if (err.status !== 404) return this.notices.error(err, `Could not remove ${file.name}`);
    }
    this.files = this.files.filter((f) => f.id !== file.id);
    this.render();
    byId("prompt").focus();
  }

  render() {
    this.chips.replaceChildren(
      ...this.files.map((f) =>
        h("li", { class: "file-chip", dataset: { attachmentId: f.id }, title: f.media_type },
          h("span", { class: "file-name" }, f.name),
          h("span", { class: "file-size" }, size(f.size)),
          h("button", {
            type: "button", class: "file-remove", "aria-label": `Remove ${f.name}`,
            onclick: () => this.remove(f),
          }, "×")),
      ),
    );
    this.chips.hidden = this.files.length === 0;
  }
}
