// What a stored message offers besides its versions: copy it (its code blocks have their
// own Copy: markdown.js), rate an answer (thumbs up or down, with an optional note), see
// which model answered and in how long, and whether its token limit cut it.

import { api } from "./api.js";
import { copyText } from "./clipboard.js";
import { h } from "./dom.js";
import { icon } from "./icons.js";

/** "model · 2.4 s" under an answer: who answered, and how long it took. */
export function answerMeta(message) {
  if (message.role !== "assistant" || !message.model) return null;
  const took = (Date.parse(message.updated_at) - Date.parse(message.created_at)) / 1000;
  const when = new Date(message.updated_at);
  const parts = [message.model];
  if (Number.isFinite(took) && took >= 0) parts.push(`${took < 10 ? took.toFixed(1) : Math.round(took)} s`);
  return h(
    "span",
    { class: "answer-meta", title: `Answered ${when.toLocaleString()}` },
    parts.join(" · "),
  );
}

/** Copy, and for an answer: feedback (and a note when its token limit cut it). */
export function messageActions(message, view) {
  const box = h("span", { class: "message-actions" });
  const copy = h("button", { type: "button", class: "link copy-message" }, "Copy");
  copy.addEventListener("click", () => copyText(view.text, copy, "Copy"));
  box.append(copy);
  if (message.role !== "assistant" || !message.id) return box;
  box.append(...new Feedback(message).buttons());
  if (message.cut) view.setCut();
  return box;
}

/** Thumbs up / down on an answer; a second click on the chosen one takes it back. A rating
 *  opens a note field (optional), sent with it. */
class Feedback {
  constructor(message) {
    this.path = `/api/chats/${encodeURIComponent(message.chat_id)}/messages/${encodeURIComponent(message.id)}/feedback`;
    this.rating = message.feedback ? message.feedback.rating : null;
    this.up = this.thumb("up", "Good answer");
    this.down = this.thumb("down", "Bad answer");
    this.status = h("span", { class: "feedback-status", role: "status" });
    this.show();
  }

  buttons() {
    return [this.up, this.down, this.status];
  }

  thumb(rating, label) {
    const button = h("button", { type: "button", class: `icon feedback feedback-${rating}`, "aria-label": label, title: label }, icon(rating));
    button.addEventListener("click", () => this.choose(rating));
    return button;
  }

  show() {
    this.up.setAttribute("aria-pressed", String(this.rating === "up"));
    this.down.setAttribute("aria-pressed", String(this.rating === "down"));
  }

  async choose(rating) {
    const again = this.rating === rating;
    try {
      if (again) await api("DELETE", this.path);
      else await api("PUT", this.path, { json: { rating } });
      this.rating = again ? null : rating;
      this.show();
      this.status.textContent = again ? "Rating removed" : "Thanks for your feedback";
      if (!again) this.askNote(rating);
    } catch (err) {
      this.status.textContent = `Not saved: ${err.message}`;
    }
  }

  /** An optional note after a rating: Enter (or Send) sends it, Escape leaves it out. */
  askNote(rating) {
    this.status.parentElement.querySelector(".feedback-note")?.remove();
    const input = h("input", { type: "text", class: "feedback-note-input", maxlength: "2000", "aria-label": "What was good or bad? (optional)", placeholder: "Add a note (optional)" });
    const send = h("button", { type: "button", class: "link" }, "Send note");
    const form = h("span", { class: "feedback-note" }, input, send);
    const submit = async () => {
      const note = input.value.trim();
      form.remove();
      if (!note) return;
      try {
        await api("PUT", this.path, { json: { rating, note } });
        this.status.textContent = "Note saved";
      } catch (err) {
        this.status.textContent = `Note not saved: ${err.message}`;
      }
    };
    send.addEventListener("click", submit);
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") submit();
      if (event.key === "Escape") {
        event.preventDefault();
        form.remove();
      }
    });
    this.status.after(form);
    input.focus();
  }
}
