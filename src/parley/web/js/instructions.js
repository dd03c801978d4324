// The open chat's own instructions (the topbar's "Instructions"): read with the chat, saved
// with PATCH; every answer in the chat heeds them after the user's own (account page).

import { api } from "./api.js";
import { byId } from "./dom.js";

export class ChatInstructions {
  constructor(notices) {
    this.notices = notices;
    this.chatId = null;
    this.panel = byId("instructions-panel");
    this.text = byId("instructions-text");
    this.status = byId("instructions-status");
    this.button = byId("chat-instructions");
    this.button.addEventListener("click", () => (this.panel.hidden ? this.open() : this.close()));
    byId("instructions-close").addEventListener("click", () => this.close());
    this.panel.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save();
    });
  }

  /** The chat shown changed: its instructions (from its JSON), or none for a new chat. */
  setChat(chat) {
    this.chatId = chat ? chat.id : null;
    this.text.value = (chat && chat.instructions) || "";
    this.button.hidden = this.chatId === null;
    this.button.textContent = chat && chat.instructions ? "Instructions ✓" : "Instructions";
    this.close(false);
  }

  open() {
    this.panel.hidden = false;
    this.button.setAttribute("aria-expanded", "true");
    this.status.textContent = "";
    this.text.focus();
  }

  close(refocus = true) {
    if (this.panel.hidden) return;
    this.panel.hidden = true;
    this.button.setAttribute("aria-expanded", "false");
    if (refocus) this.button.focus();
  }

  async save() {
    const chatId = this.chatId;
    try {
      const instructions = this.text.value.trim();
      const chat = await api("PATCH", `/api/chats/${encodeURIComponent(chatId)}`, { json: { instructions } });
      if (chatId !== this.chatId) return;
      this.button.textContent = chat.instructions ? "Instructions ✓" : "Instructions";
      this.status.textContent = chat.instructions ? "Saved: the next answers heed them." : "Cleared.";
    } catch (err) {
      this.notices.error(err, "Could not save the chat's instructions");
    }
  }
}
