// Errors the user must see: shown in an alert region until dismissed, never swallowed.

import { byId, h } from "./dom.js";

const MAX_SHOWN = 3;

export class Notices {
  constructor() {
    this.el = byId("errors");
    this.onUnauthenticated = () => {};
  }

  /** Show what went wrong; `context` says what the user was doing ("Could not rename"). */
  error(err, context) {
    if (err && err.name === "AbortError") return;
    if (err && err.status === 401) {
      this.onUnauthenticated("Your session has ended. Please log in again.");
      return;
    }
    console.error(context, err);
    const message = err && err.message ? err.message : String(err);
    const text = context ? `${context}: ${message}` : message;
    const item = h(
      "div",
      { class: "error-item" },
      h("span", {}, text),
      h("button", { type: "button", class: "link", onclick: () => item.remove() }, "Dismiss"),
    );
    this.el.append(item);
    while (this.el.children.length > MAX_SHOWN) this.el.firstElementChild.remove();
  }

  clear() {
    this.el.replaceChildren();
  }
}
