// Wiring: which screen shows (log in, or the chat), the URL of the open chat, the
// composer's keys, and the sidebar drawer on narrow screens.

import { AccountPanel, AuthForm, logout } from "./account.js";
import { api } from "./api.js";
import { Banner } from "./banner.js";
import { Conversation } from "./conversation.js";
import { DataPanel } from "./data.js";
import { byId } from "./dom.js";
import { ChatInstructions } from "./instructions.js";
import { ModelPicker } from "./models.js";
import { ToolPicker } from "./tools.js";
import { Notices } from "./notices.js";
import { MESSAGE_HASH, revealMessage, SearchBox } from "./search.js";
import { SharesPanel } from "./shares.js";
import { Sidebar } from "./sidebar.js";
import { ThemeToggle } from "./theme-toggle.js";

const CHAT_PATH = /^\/c\/([^/]+)\/?$/;

class App {
  constructor() {
    this.notices = new Notices();
    this.notices.onUnauthenticated = (message) => this.showAuth(message);
    this.banner = new Banner();
    this.account = new AccountPanel(this.notices);
    this.theme = new ThemeToggle(this.notices);
    this.account.onUser = (user) => this.theme.show(user.theme);
    this.instructions = new ChatInstructions(this.notices);
    this.auth = new AuthForm(() => this.enter());
    this.models = new ModelPicker(this.notices);
    this.tools = new ToolPicker(this.notices);
    this.sidebar = new Sidebar({
      notices: this.notices,
      hooks: {
        select: (chatId) => this.navigate(chatId),
        deleted: (chatId) => chatId === this.conversation.chatId && this.navigate(null),
        renamed: (chat) => chat.id === this.conversation.chatId && this.conversation.setTitle(chat.title),
      },
    });
    this.conversation = new Conversation({
      notices: this.notices,
      banner: this.banner,
      models: this.models,
      tools: this.tools,
      hooks: {
        chatCreated: (chat) => this.chatCreated(chat),
        chatOpened: (chat) => this.instructions.setChat(chat),
        chatTouched: (chatId) => this.sidebar.touchId(chatId),
        chatRenamed: (chat) => this.sidebar.setTitle(chat.id, chat.title),
        runFinished: () => this.account.refresh(),
        streamingChanged: (streaming) => this.setStreaming(streaming),
        restoreDraft: (text) => this.restoreDraft(text),
      },
    });
    this.data = new DataPanel({
      notices: this.notices,
      hooks: {
        imported: () => this.sidebar.reset(),
        deleted: () => {
          history.replaceState(null, "", "/");
          this.showAuth("Your account and all its data are deleted.");
        },
      },
    });
    this.search = new SearchBox({
      notices: this.notices,
      hooks: { open: (chatId, messageId) => this.navigate(chatId, { messageId }) },
    });
    this.shares = new SharesPanel({ notices: this.notices, chatId: () => this.conversation.chatId });
    this.prompt = byId("prompt");
    this.wireComposer();
    this.wireDrawer();
    byId("new-chat").addEventListener("click", () => this.navigate(null));
    byId("logout").addEventListener("click", () => this.logout());
    window.addEventListener("popstate", () => this.openRoute());
    window.addEventListener("hashchange", () => { // a reset link opened in this tab
      if (window.location.hash.startsWith("#reset=")) this.showAuth();
    });
  }

  async start() {
    if (window.location.hash.startsWith("#reset=")) return this.showAuth(); // a reset link
    const confirmed = await this.confirmEmail();
    try {
      await this.account.load();
    } catch (err) {
      if (err.status === 401) return this.showAuth(confirmed);
      this.showAuth(`Cannot load your account: ${err.message}`);
      return;
    }
    await this.showShell();
  }

  /** A confirmation link's token (#confirm=…) sent; what to tell the user, if anything. */
  async confirmEmail() {
    const hash = window.location.hash;
    if (!hash.startsWith("#confirm=")) return "";
    window.history.replaceState(null, "", window.location.pathname);
    try {
      const token = decodeURIComponent(hash.slice("#confirm=".length));
      const done = await api("POST", "/api/auth/confirm", { json: { token } });
      return `${done.email} is confirmed. Welcome to parley.`;
    } catch (err) {
      return err.message;
    }
  }

  async enter() {
    await this.account.load();
    await this.showShell();
  }

  showAuth(notice) {
    this.conversation.detach();
    byId("shell").hidden = true;
    byId("auth").hidden = false;
    document.title = "parley";
    this.auth.show(notice);
  }

  async showShell() {
    this.notices.clear();
    // before the shell shows: a message sent meanwhile would be cut off by openRoute
    try {
      await this.models.load(); // (the user's tier decides which)
      await this.tools.load();
      this.tools.arrived();
    } catch (err) {
      return this.notices.error(err); // a 401: the log-in screen
    }
    byId("auth").hidden = true;
    byId("shell").hidden = false;
    this.sidebar.reset();
    this.openRoute();
  }

  routeChatId() {
    const m = CHAT_PATH.exec(window.location.pathname);
    return m ? decodeURIComponent(m[1]) : null;
  }

  /** Show the chat in the URL (a reload or a shared link lands here). */
  async openRoute() {
    const chatId = this.routeChatId();
    this.sidebar.setActive(chatId);
    this.shares.setChat(chatId);
    this.closeDrawer();
    this.notices.clear(); // what went wrong in the chat left behind is not about this one
    try {
      await this.conversation.open(chatId);
      const found = MESSAGE_HASH.exec(window.location.hash); // a search result's message
      if (chatId && found) await this.reveal(chatId, found[1]);
    } catch (err) {
      if (err.status === 404) {
        this.notices.error(err, "That chat does not exist");
        this.navigate(null, { replace: true });
      } else {
        this.notices.error(err, "Could not open the chat");
      }
    }
    this.prompt.focus();
  }

  /** Show a search hit's message: on another branch, that branch is shown first. */
  async reveal(chatId, messageId) {
    if (await revealMessage(this.conversation, messageId)) return;
    if (this.conversation.chatId !== chatId) return;
    try {
      await this.conversation.showBranchOf(messageId);
    } catch (err) {
      if (err.status !== 404) throw err;
    }
    if (!(await revealMessage(this.conversation, messageId))) {
      this.notices.error(new Error("That message is no longer in the chat."), "Not shown");
    }
  }

  navigate(chatId, { replace = false, messageId = null } = {}) {
    const path = (chatId === null ? "/" : `/c/${encodeURIComponent(chatId)}`) +
      (messageId ? `#m-${messageId}` : "");
    if (path !== window.location.pathname + window.location.hash) {
      if (replace) history.replaceState(null, "", path);
      else history.pushState(null, "", path);
    }
    return this.openRoute();
  }

  chatCreated(chat) {
    this.tools.chatCreated(chat.id);
    this.instructions.setChat(chat);
    history.pushState(null, "", `/c/${encodeURIComponent(chat.id)}`);
    this.sidebar.touch(chat);
    this.sidebar.setActive(chat.id);
    this.shares.setChat(chat.id);
  }

  async logout() {
    try {
      await logout();
    } catch (err) {
      if (err.status !== 401) return this.notices.error(err, "Could not log out");
    }
    history.replaceState(null, "", "/");
    this.showAuth("You have logged out.");
  }

  wireComposer() {
    const form = byId("composer");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    this.prompt.addEventListener("input", () => this.fitPrompt());
    byId("stop").addEventListener("click", () => this.conversation.stop());
  }

  send() {
    const text = this.prompt.value;
    if (!text.trim() || this.conversation.busy) return;
    this.prompt.value = "";
    this.fitPrompt();
    this.conversation.submit(text);
  }

  restoreDraft(text) {
    if (!this.prompt.value) this.prompt.value = text;
    this.fitPrompt();
  }

  fitPrompt() {
    this.prompt.style.height = "auto";
    this.prompt.style.height = `${Math.min(this.prompt.scrollHeight, 240)}px`;
  }

  setStreaming(streaming) {
    byId("send").hidden = streaming;
    byId("stop").hidden = !streaming;
    byId("composer").classList.toggle("streaming", streaming);
  }

  wireDrawer() {
    const toggle = byId("menu-toggle");
    toggle.addEventListener("click", () => {
      if (byId("sidebar").classList.contains("open")) this.closeDrawer();
      else this.openDrawer();
    });
    byId("scrim").addEventListener("click", () => this.closeDrawer());
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !event.defaultPrevented) this.escape();
    });
  }

  /** Escape closes what is open, the innermost first: a panel or form, else the drawer. */
  escape() {
    if (!byId("share-panel").hidden) {
      this.shares.close();
      byId("shared-links").focus();
    } else if (!byId("delete-form").hidden) {
      this.data.askToDelete(false);
      byId("delete-account").focus();
    } else if (!byId("instructions-panel").hidden) {
      this.instructions.close();
    } else {
      this.closeDrawer();
    }
  }

  openDrawer() {
    byId("sidebar").classList.add("open");
    byId("scrim").hidden = false;
    byId("menu-toggle").setAttribute("aria-expanded", "true");
    byId("new-chat").focus();
  }

  closeDrawer() {
    if (!byId("sidebar").classList.contains("open")) return;
    byId("sidebar").classList.remove("open");
    byId("scrim").hidden = true;
    byId("menu-toggle").setAttribute("aria-expanded", "false");
  }
}

new App().start();
