// The user's data: export every chat (a background job, then a download), import chats
// (parley's export or ChatGPT's, one request a file), delete the account.

import { api, apiGet } from "./api.js";
import { byId } from "./dom.js";

const POLL_MS = 1000;
const EXPORT_WAIT_MS = 10 * 60 * 1000;

export class DataPanel {
  /** hooks: imported() after chats arrived, deleted() after the account is gone. */
  constructor({ notices, hooks }) {
    this.notices = notices;
    this.hooks = hooks;
    this.status = byId("data-status");
    this.file = byId("import-file");
    this.form = byId("delete-form");
    byId("export-chats").addEventListener("click", () => this.exportChats());
    byId("import-chats").addEventListener("click", () => this.file.click());
    this.file.addEventListener("change", () => this.importFiles([...this.file.files]));
    byId("delete-account").addEventListener("click", () => this.askToDelete(true));
    byId("delete-cancel").addEventListener("click", () => this.askToDelete(false));
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.deleteAccount();
    });
  }

  say(text) {
    this.status.textContent = text;
  }

  async exportChats() {
    this.say("Preparing your export…");
    try {
      let job = await api("POST", "/api/exports");
      const deadline = Date.now() + EXPORT_WAIT_MS;
      while (job.status === "pending" && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        job = await apiGet(`/api/exports/${encodeURIComponent(job.id)}`);
      }
      if (job.status !== "ready") throw new Error(job.error || `the export is ${job.status}`);
      this.say(`Export ready: ${job.chats} chats, ${job.messages} messages.`);
      const link = document.createElement("a");
      link.href = job.download_url;
      link.download = "";
      link.id = "export-download";
      link.textContent = "Download";
      this.status.append(" ", link);
      link.click();
    } catch (err) {
      this.say("");
      this.notices.error(err, "Could not export your chats");
    }
  }

  async importFiles(files) {
    this.file.value = "";
    if (!files.length) return;
    let chats = 0;
    let messages = 0;
    try {
      for (const file of files) {
        this.say(`Importing ${file.name}…`);
        const path = `/api/imports?filename=${encodeURIComponent(file.name)}`;
        const result = await api("POST", path, { body: file });
        chats += result.chats;
        messages += result.messages;
      }
      this.say(`Imported ${chats} chats (${messages} messages).`);
      this.hooks.imported();
    } catch (err) {
      this.say(chats ? `Imported ${chats} chats before an error.` : "");
      if (chats) this.hooks.imported();
      this.notices.error(err, "Could not import");
    }
  }

  askToDelete(open) {
    this.form.hidden = !open;
    if (open) byId("delete-password").focus();
  }

  async deleteAccount() {
    const password = byId("delete-password");
    try {
      await api("DELETE", "/api/me", { json: { password: password.value } });
    } catch (err) {
      this.notices.error(err, "Could not delete your account");
      return;
    }
    password.value = "";
    this.form.hidden = true;
    this.hooks.deleted();
  }
}
