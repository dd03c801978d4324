// The open chat: its messages (older pages on scroll up), sending, streaming, stopping,
// and rejoining an answer that is still being generated.

import { api, apiGet, newKey, send } from "./api.js";
import { AttachmentTray } from "./attachments.js";
import { branchRequests, branchTools, editInPlace } from "./branches.js";
import { byId, isolate } from "./dom.js";
import { answerMeta, messageActions } from "./message-actions.js";
import { MessageView } from "./messages.js";
import { followRun } from "./run.js";
import { TemporaryChat } from "./temporary.js";

const PAGE = 30;
const NEAR_BOTTOM_PX = 120;

export class Conversation {
  /**
   * hooks: {chatCreated(chat), chatTouched(chatId), runFinished(), streamingChanged(bool),
   *         restoreDraft(text)}
   */
  constructor({ notices, banner, models, tools, hooks }) {
    this.notices = notices;
    this.banner = banner;
    this.models = models; // ModelPicker: which model the next message goes to
    this.tools = tools; // ToolPicker: which server tools the next answer may call
    this.hooks = hooks;
    this.scroller = byId("messages");
    this.list = byId("message-list");
    this.sentinel = byId("messages-sentinel");
    this.status = byId("messages-status");
    this.empty = byId("empty-state");
    this.title = byId("chat-title");
    this.chatId = null;
    this.untitled = null; // a chat made for its first file: titled by its first message
    this.cursor = null;
    this.loadingOlder = false;
    this.generation = 0; // bumps on every open: late answers for an old view are dropped
    this.active = null; // {view, controller, chatId, stopRequested}
    this.views = new WeakMap(); // <li> → MessageView
    this.stick = true; // keep the newest text in sight while the reader is at the bottom
    this.scroller.addEventListener("scroll", () => (this.stick = this.nearBottom()), {
      passive: true,
    });
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.loadOlder();
    }, { root: this.scroller, rootMargin: "200px 0px 0px 0px" }).observe(this.sentinel);
    // the files for the next message (attachments.js); a first file makes the chat
    // (titled by its first message when that is sent: not by the file's name)
    this.files = new AttachmentTray({ notices, ensureChat: () => this.chatId ?? this.createChat(null) });
    // a temporary chat: switched on (or off) on a new chat, before its first message
    this.temporary = new TemporaryChat((on) => this.open(null, { temporary: on }));
  }

  /** Show a chat (null: a new, empty one; `temporary`: one kept nowhere). */
  async open(chatId, { temporary = false } = {}) {
    this.detach();
    const generation = ++this.generation;
    this.chatId = chatId;
    this.temporary.set(temporary && chatId === null);
    this.temporary.offer(chatId === null);
    this.files.open(chatId);
    this.cursor = null;
    this.list.replaceChildren();
    this.status.textContent = "";
    this.title.textContent = temporary ? "Temporary chat" : "New chat";
    this.empty.hidden = chatId !== null;
    this.tools.forChat(chatId);
    if (chatId === null) {
      this.hooks.chatOpened(null);
      this.models.forNewChat();
      return;
    }
    this.status.textContent = "Loading…";
    try {
      const [chat, page] = await Promise.all([
        apiGet(`/api/chats/${encodeURIComponent(chatId)}`),
        apiGet(this.pagePath(null)),
      ]);
      if (generation !== this.generation) return;
      this.setTitle(chat.title);
      this.hooks.chatOpened(chat);
      this.models.forChat(page.data);
      this.cursor = page.next_cursor;
      this.prepend(page.data);
      this.status.textContent = "";
      this.empty.hidden = this.list.children.length > 0;
      this.scrollToBottom();
      this.rejoinLive();
    } catch (err) {
      if (generation !== this.generation) return;
      this.status.textContent = "";
      throw err;
    }
  }

  setTitle(title) {
    this.title.textContent = title;
    document.title = `${isolate(title)} · parley`;
  }

  pagePath(cursor) {
    const params = new URLSearchParams({ limit: String(PAGE), order: "desc" });
    if (cursor) params.set("cursor", cursor);
    return `/api/chats/${encodeURIComponent(this.chatId)}/messages?${params}`;
  }

  async loadOlder() {
    if (!this.chatId || !this.cursor || this.loadingOlder) return;
    this.loadingOlder = true;
    const generation = this.generation;
    this.status.textContent = "Loading earlier messages…";
    try {
      const page = await apiGet(this.pagePath(this.cursor));
      if (generation !== this.generation) return;
      const before = this.scroller.scrollHeight;
      this.prepend(page.data);
      this.scroller.scrollTop += this.scroller.scrollHeight - before; // keep the reader's place
      this.cursor = page.next_cursor;
    } catch (err) {
      this.notices.error(err, "Could not load earlier messages");
    } finally {
      this.loadingOlder = false;
      if (generation === this.generation) this.status.textContent = "";
    }
  }

  /** Messages come newest first; show them oldest at the top. */
  prepend(messages) {
    const views = messages.map((m) => this.view(m)).reverse();
    this.list.prepend(...views.map((v) => v.el));
    for (const view of views) this.views.set(view.el, view);
  }

  /** An answer still being generated when the chat was opened: rejoin its stream. */
  rejoinLive() {
    const live = [...this.list.querySelectorAll('li.assistant[data-status="in_progress"]')];
    const last = live.at(-1);
    if (!last || !last.dataset.runId) return;
    this.follow(this.views.get(last), { runId: last.dataset.runId });
  }

  get busy() {
    return this.active !== null;
  }

  /** Send the composer's text. Resolves false if nothing was sent (the text is restored). */
  async submit(text) {
    if (this.busy || !text.trim()) return false;
    if (this.temporary.on) return this.submitTemporary(text);
    const controller = this.begin(null);
    const model = this.models.value; // fixed now: a retry must send the same body
    const tools = this.tools.value;
    const files = [...this.files.files]; // (so are the files)
    try {
      // a new chat is made first; a 429/503 (the database failing over) waits on the banner
      const makeChat = () => this.createChat(text);
      const chatId = this.chatId ?? (await this.admitted(makeChat, controller.signal));
      if (chatId === null) {
        this.hooks.restoreDraft(text);
        return false;
      }
      this.active.chatId = chatId;
      if (this.untitled === chatId) await this.titleFrom(chatId, text);
      const generation = this.generation;
      this.empty.hidden = true;
      const user = this.add({ role: "user", content: text, status: "completed", attachments: files });
      const answer = this.add({ role: "assistant", content: "", status: "sending" });
      this.active.view = answer;
      this.scrollToBottom();
      const key = newKey();
      const ids = files.map((f) => f.id);
      const post = () => this.post(chatId, { content: text, model, ids, tools }, key, controller.signal);
      const first = await this.admitted(post, controller.signal);
      if (first === null) {
        user.el.remove();
        answer.el.remove();
        this.empty.hidden = this.list.children.length > 0;
        this.hooks.restoreDraft(text);
        return false;
      }
      this.files.sent(ids);
      this.hooks.chatTouched(chatId);
      if (generation !== this.generation) return true;
      const done = await this.stream(answer, { first, start: post });
      if (done) this.settleAfter = { chatId, answer };
      return true;
    } catch (err) {
      if (err.code === "content_blocked") return this.refused(err);
      this.failSend(err, text);
      return false;
    } finally {
      this.finish(controller);
    }
  }

  /** A temporary chat's message: sent with the conversation before it; nothing is made
   *  on the server but the run (no chat, no messages), so nothing is settled after. */
  async submitTemporary(text) {
    const controller = this.begin(null);
    const model = this.models.value;
    const key = newKey();
    this.temporary.offer(false);
    this.empty.hidden = true;
    const user = this.add({ role: "user", content: text, status: "completed" });
    const answer = this.add({ role: "assistant", content: "", status: "sending" });
    this.active.view = answer;
    try {
      const post = () => this.temporary.post(text, model, key, controller.signal);
      const first = await this.admitted(post, controller.signal);
      if (first === null) {
        user.el.remove();
        answer.el.remove();
        this.hooks.restoreDraft(text);
        return false;
      }
      const done = await this.stream(answer, { first, start: post });
      if (done) this.temporary.answered(text, answer.text);
      return true;
    } catch (err) {
      this.failSend(err, text);
      return false;
    } finally {
      this.finish(controller);
    }
  }

  /** The content policy refused the message: it stays in the chat (the server stored it),
   *  and its answer's place says why; the chat is shown again as stored, so the message can
   *  be edited and the answer tried again. */
  refused(err) {
    const view = this.active && this.active.view;
    if (view) {
      view.setStatus("rejected", err.message);
      view.flush();
    }
    const chatId = this.active && this.active.chatId;
    if (chatId) {
      this.hooks.chatTouched(chatId);
      const again = () => this.open(chatId).catch((e) => this.notices.error(e, "Could not show the chat"));
      setTimeout(() => this.chatId === chatId && !this.busy && again(), 0);
    }
    return true;
  }

  async createChat(text) {
    // titled by the server's rule (parley.text.title_from): its first line that shows something
    const chat = await api("POST", "/api/chats", { json: text === null ? {} : { title_from: text } });
    this.untitled = text === null ? chat.id : null;
    this.chatId = chat.id;
    this.setTitle(chat.title);
    this.hooks.chatCreated(chat);
    return chat.id;
  }

  /** A chat made for its first file gets its title from its first message. */
  async titleFrom(chatId, text) {
    this.untitled = null;
    try {
      const chat = await api("PATCH", `/api/chats/${encodeURIComponent(chatId)}`, { json: { title_from: text } });
      if (this.chatId === chatId) this.setTitle(chat.title);
      this.hooks.chatRenamed(chat);
    } catch (err) {
      this.notices.error(err, "Could not title the chat");
    }
  }

  /** message: {content, model, ids} (model null: the server's default; ids: its files). */
  post(chatId, { content, model, ids = [], tools = [] }, key, signal) {
    const json = model ? { content, model } : { content };
    if (ids.length) json.attachment_ids = ids;
    if (tools.length) json.tools = tools;
    return send("POST", `/api/chats/${encodeURIComponent(chatId)}/messages`, {
      json,
      headers: { "Idempotency-Key": key },
      accept: "text/event-stream",
      signal,
    });
  }

  /**
   * POST until admitted; 429/503 wait on the banner, then `post` is called again (a send
   * re-POSTs with its one Idempotency-Key: sent once however often it is retried). null if
   * the user gave up.
   */
  async admitted(post, signal) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await post();
      } catch (err) {
        if (!err.retryable || signal.aborted) throw err;
        const view = this.active && this.active.view;
        view?.setStatus("waiting");
        const again = await this.banner.wait(err, attempt);
        if (!again || signal.aborted) return null;
        view?.setStatus("sending");
      }
    }
  }

  failSend(err, text) {
    if (err.name === "AbortError") return;
    const view = this.active && this.active.view;
    if (view) {
      view.setStatus("failed", err.message);
      view.flush();
      view.el.previousElementSibling?.classList.add("unsent");
    }
    this.hooks.restoreDraft(text);
    this.notices.error(err, "Your message was not sent");
  }

  /** The user's answer to a call that waits for it (its run: the view's). */
  async answerCall(view, callId, approve) {
    const runId = view.runId;
    if (!runId) return;
    try {
      const path = `/api/runs/${encodeURIComponent(runId)}/tool-calls/${encodeURIComponent(callId)}`;
      await api("POST", path, { json: { approve } });
    } catch (err) {
      this.notices.error(err, "Could not send your answer");
    }
  }

  /** Follow a run on `view` until done (first: the POST's open response). */
  async stream(view, { first = null, start = null, runId = null }) {
    view.onAnswer = (callId, approve) => this.answerCall(view, callId, approve);
    const signal = this.active.controller.signal;
    let failure = null;
    const done = await followRun({
      first,
      start,
      runId,
      signal,
      on: {
        reset: () => view.reset(),
        status: (data) => this.onStatus(view, data),
        delta: (data) => view.append(data.text, data.replace),
        reasoning: (data) => view.appendReasoning(data.text),
        toolCall: (data) => view.appendCall(data),
        toolResult: (data) => view.appendResult(data),
        toolConfirm: (data) => view.askConfirm(data),
        toolAnswer: (data) => view.answered(data),
        error: (data) => (failure = data.message),
        reconnecting: () => view.setStatus("reconnecting"),
        done: (data) => {
          view.setIds({ id: data.message_id, run_id: data.run_id });
          view.setStatus(data.status, data.status === "completed" ? null : failure);
          view.flush();
        },
      },
    });
    if (done) this.hooks.runFinished();
    return done;
  }

  onStatus(view, data) {
    view.setIds({ run_id: data.run_id });
    if (data.downgraded_from) view.setDowngraded(data.model, data.downgraded_from);
    view.setStatus(data.status === "queued" ? "queued" : "in_progress");
    if (this.active && this.active.stopRequested) this.stop();
  }

  /** Rejoin a run already under way (reload, or a chat opened mid-answer). */
  async follow(view, { runId }) {
    const controller = this.begin(view);
    try {
      if (await this.stream(view, { runId })) this.settleAfter = { chatId: this.chatId, answer: view };
    } catch (err) {
      view.setStatus("failed", err.message);
      this.notices.error(err, "Could not follow the answer");
    } finally {
      this.finish(controller);
    }
  }

  /** An answer starts streaming on `view` (null until its placeholder exists). */
  begin(view) {
    const controller = new AbortController();
    this.active = { view, controller, stopRequested: false, chatId: this.chatId };
    this.hooks.streamingChanged(true);
    return controller;
  }

  finish(controller) {
    if (this.active && this.active.controller === controller) {
      this.active = null;
      this.hooks.streamingChanged(false);
    }
    const settle = this.settleAfter;
    this.settleAfter = null;
    if (settle) this.settle(settle.chatId, settle.answer);
  }

  /** Stop the answer being generated: the model's slot is freed; the partial text stays. */
  async stop() {
    const active = this.active;
    if (!active) return;
    const runId = active.view && active.view.runId;
    if (!runId) {
      this.banner.settle(false); // waiting to be admitted: give up sending
      active.stopRequested = true; // the run has no id yet: stop as soon as it does
      return;
    }
    try {
      const run = encodeURIComponent(runId);
      const chat = active.chatId && encodeURIComponent(active.chatId);
      await api("POST", chat ? `/api/chats/${chat}/runs/${run}/cancel` : `/api/runs/${run}/cancel`);
    } catch (err) {
      this.notices.error(err, "Could not stop the answer");
    }
  }

  /** Leave the current view: stop reading its stream (the run itself goes on). */
  detach() {
    this.banner.settle(false);
    if (this.active) {
      this.active.controller.abort();
      this.active = null;
      this.hooks.streamingChanged(false);
    }
  }

  view(message) {
    const view = new MessageView(message, () => this.stick && this.scrollToBottom());
    if (message.id) {
      const tools = branchTools(message, this.branchActions());
      tools.prepend(messageActions(message, view));
      const meta = answerMeta(message);
      if (meta) tools.append(meta);
      view.el.querySelector(".bubble").append(tools);
    }
    this.views.set(view.el, view);
    return view;
  }

  /** An answer streamed here has ended: it and its question are shown again as stored
   *  (their ids, versions and actions), in place. */
  async settle(chatId, answer) {
    try {
      const page = await apiGet(`/api/chats/${encodeURIComponent(chatId)}/messages?limit=2&order=desc`);
      if (chatId !== this.chatId || this.busy || !answer.el.isConnected) return;
      const [stored, question] = page.data;
      if (!stored || stored.role !== "assistant" || stored.id !== answer.el.dataset.messageId) return;
      const asked = answer.el.previousElementSibling;
      if (question && question.role === "user" && asked && asked.dataset.role === "user" && !asked.dataset.messageId) {
        asked.replaceWith(this.view(question).el);
      }
      answer.el.replaceWith(this.view(stored).el);
    } catch (err) {
      this.notices.error(err, "Could not refresh the answer");
    }
  }

  /** Show the branch through a message (a search hit on a version not shown). */
  async showBranchOf(messageId) {
    await branchRequests.show(this.chatId, messageId);
    await this.open(this.chatId);
  }

  /** ‹ › between versions, edit, regenerate: each asks the server, then shows the chat again
   *  (the branch shown now, an answer under way rejoined). */
  branchActions() {
    const chatId = () => this.chatId;
    const model = () => this.models.value;
    const act = async (request, what) => {
      if (this.busy) return;
      try {
        await request();
        await this.open(this.chatId);
        this.hooks.chatTouched(this.chatId);
      } catch (err) {
        this.notices.error(err, what);
      }
    };
    return {
      show: (id) => act(() => branchRequests.show(chatId(), id), "Could not show that version"),
      regenerate: (m) => act(() => branchRequests.regenerate(chatId(), m.id, model()), "Could not answer again"),
      continue: (m) => act(() => branchRequests.continue(chatId(), m.id, this.models.forAnswer(m)), "Could not continue"),
      edit: async (m) => {
        const li = this.list.querySelector(`li[data-message-id="${CSS.escape(m.id)}"]`);
        const text = li && (await editInPlace(this.views.get(li)));
        if (text) await act(() => branchRequests.edit(chatId(), m.id, text, model()), "Your edit was not sent");
      },
    };
  }

  add(message) {
    const view = this.view(message);
    this.list.append(view.el);
    this.scrollToBottom();
    return view;
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM_PX;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.stick = true;
  }
}
