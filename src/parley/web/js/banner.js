// The "busy, retrying in N s" banner: counts down by Retry-After, then lets the caller retry.

import { byId, duration } from "./dom.js";

const FALLBACK_SECONDS = 2;
const MAX_FALLBACK_SECONDS = 60;

/** What the banner says for a refusal (429/503) that a later retry can get past. */
export function describeRefusal(err) {
  if (err.code === "budget_exhausted") {
    return (left) => `Your token budget is used up. It refills enough in ${left}; sending then.`;
  }
  if (err.status === 503) return (left) => `The service is busy. Retrying in ${left}.`;
  if (err.status === 0) return (left) => `Cannot reach the server. Retrying in ${left}.`;
  return (left) => `Too many requests right now. Retrying in ${left}.`;
}

export class Banner {
  constructor() {
    this.el = byId("banner");
    this.text = byId("banner-text");
    this.retry = byId("banner-retry");
    this.cancel = byId("banner-cancel");
    this.pending = null;
    this.retry.addEventListener("click", () => this.settle(true));
    this.cancel.addEventListener("click", () => this.settle(false));
  }

  /**
   * Count down from the error's Retry-After (or an exponential fallback for `attempt`).
   * Resolves true when it is time to retry, false when the user cancels.
   */
  wait(err, attempt) {
    this.settle(false);
    const fallback = Math.min(MAX_FALLBACK_SECONDS, FALLBACK_SECONDS * 2 ** attempt);
    const seconds = err.retryAfter ?? fallback;
    const say = describeRefusal(err);
    const until = Date.now() + seconds * 1000;
    this.el.dataset.kind = err.code === "budget_exhausted" ? "quota" : "busy";
    return new Promise((resolve) => {
      const tick = () => {
        const left = (until - Date.now()) / 1000;
        if (left <= 0) return this.settle(true);
        const message = say(duration(left));
        if (this.text.textContent !== message) this.text.textContent = message;
      };
      this.pending = { resolve, timer: setInterval(tick, 250) };
      tick();
      this.el.hidden = false;
    });
  }

  settle(retry) {
    if (this.pending === null) return;
    const { resolve, timer } = this.pending;
    this.pending = null;
    clearInterval(timer);
    this.el.hidden = true;
    resolve(retry);
  }
}
