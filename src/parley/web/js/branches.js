// Branches on screen: ‹ 2/3 › between the versions of a message, editing a question (a new
// branch), answering again (a sibling answer), continuing a cut answer (a longer sibling).
// Each action asks the server, then shows the chat again: the branch it now shows, and any
// answer still streaming (rejoined).

import { api, newKey, send } from "./api.js";
import { h } from "./dom.js";

/** The tools under a message: its versions, and edit (questions) or regenerate and continue
 *  (answers). */
export function branchTools(message, actions) {
  const tools = h("div", { class: "message-tools" });
  const ids = message.sibling_ids || [];
  if (ids.length > 1) {
    const at = (message.sibling_index || 1) - 1;
    const go = (to) => () => actions.show(ids[to]);
    const prev = h("button", { type: "button", class: "icon branch-prev", "aria-label": "Previous version" }, "‹");
    const next = h("button", { type: "button", class: "icon branch-next", "aria-label": "Next version" }, "›");
    prev.disabled = at === 0;
    next.disabled = at === ids.length - 1;
    prev.addEventListener("click", go(at - 1));
    next.addEventListener("click", go(at + 1));
    tools.append(prev, h("span", { class: "branch-position" }, `${at + 1}/${ids.length}`), next);
  }
  if (message.id && message.role === "user") {
    const edit = h("button", { type: "button", class: "link edit-message" }, "Edit");
    edit.addEventListener("click", () => actions.edit(message));
    tools.append(edit);
  } else if (message.id && message.role === "assistant") {
    const again = h("button", { type: "button", class: "link regenerate" }, "Regenerate");
    again.addEventListener("click", () => actions.regenerate(message));
    tools.append(again);
    if (continuable(message)) {
      const more = h("button", { type: "button", class: "link continue-answer" }, "Continue");
      more.addEventListener("click", () => actions.continue(message));
      tools.append(more);
    }
  }
  return tools;
}

/** An answer cut at its token limit, or stopped after saying something, can go on. */
function continuable(message) {
  return Boolean(message.content) && (message.cut || message.status === "cancelled");
}

/** The server side of each action; each resolves once the chat should be shown again. */
export const branchRequests = {
  show: (chatId, messageId) =>
    api("PUT", `/api/chats/${encodeURIComponent(chatId)}/branch`, { json: { message_id: messageId } }),
  edit: (chatId, messageId, content, model) =>
    send("POST", `/api/chats/${encodeURIComponent(chatId)}/messages`, {
      json: model ? { content, model, edit_of: messageId } : { content, edit_of: messageId },
      headers: { "Idempotency-Key": newKey() },
    }),
  continue: (chatId, messageId, model) =>
    send("POST", `/api/chats/${encodeURIComponent(chatId)}/messages/${encodeURIComponent(messageId)}/continue`, {
      json: model ? { model } : {},
      headers: { "Idempotency-Key": newKey() },
    }),
  regenerate: (chatId, messageId, model) =>
    send("POST", `/api/chats/${encodeURIComponent(chatId)}/messages/${encodeURIComponent(messageId)}/regenerate`, {
      json: model ? { model } : {},
      headers: { "Idempotency-Key": newKey() },
    }),
};

/** Put an editor in place of a question's text: resolves to the new text, or null. */
export function editInPlace(view) {
  return new Promise((resolve) => {
    const area = h("textarea", { class: "edit-area", rows: "3", "aria-label": "Edit your message" });
    area.value = view.text;
    const save = h("button", { type: "button", class: "primary save-edit" }, "Send");
    const cancel = h("button", { type: "button", class: "link cancel-edit" }, "Cancel");
    const form = h("div", { class: "edit-form" }, area, h("span", { class: "edit-buttons" }, save, cancel));
    view.content.hidden = true;
    view.content.after(form);
    area.focus();
    const done = (value) => {
      form.remove();
      view.content.hidden = false;
      resolve(value);
    };
    const send = () => done(area.value.trim() ? area.value : null);
    save.addEventListener("click", send);
    cancel.addEventListener("click", () => done(null));
    // as in the composer: Enter sends, Shift+Enter a new line; Escape cancels
    area.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        send();
      } else if (event.key === "Escape") {
        event.preventDefault(); // (not the drawer's too)
        done(null);
      }
    });
  });
}
