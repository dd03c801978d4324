// The "busy, retrying in N s" banner: counts down by Retry-After, then lets the caller retry.

import { byId, duration } from "./dom.js";

const FALLBACK_SECONDS = 2;
const MAX_FALLBACK_SECONDS = 60;

/**
 * Seconds to wait before retry `attempt` + 1 after a refusal (429/503). The first retry
 * waits what the server said (Retry-After); later ones follow the tier's guidance in the
 * refusal's body: exponential (base · 2^(n-1), jittered to a random 50 to 100%: the free
 * tier's, so a crowd's retries spread out) or linear (base · n: paid tiers), capped, and
 * never sooner than the server said. Without guidance: 2 s, 4 s, 8 s, ... up to 60 s.
 */
export function retryDelay(err, attempt, random = Math.random) {
  const guidance = err.backoff;
  if (!guidance) return err.retryAfter ?? Math.min(MAX_FALLBACK_SECONDS, FALLBACK_SECONDS * 2 ** attempt);
  let delay = attempt === 0 ? 0 : scheduled(guidance, attempt);
  if (guidance.jitter) delay *= 0.5 + random() * 0.5;
  return Math.max(err.retryAfter ?? guidance.base_seconds, delay);
}

function scheduled({ strategy, base_seconds: base, max_seconds: max }, n) {
  const raw = strategy === "exponential" ? base * 2 ** Math.min(n - 1, 32) : base * n;
  return Math.min(raw, max);
}

/** What the banner says for a refusal (429/503) that a later retry can get past. */
export function describeRefusal(err) {
  if (err.code === "budget_exhausted") {
    return (left) => `Your token budget is used up. It refills enough in ${left}; sending then.`;
  }
  if (err.code === "too_many_runs") {
    return (left) => `You have as many answers in progress as your plan allows. Retrying in ${left}.`;
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
   * Count down `retryDelay(err, attempt)`. Resolves true when it is time to retry, false
   * when the user cancels.
   */
  wait(err, attempt) {
    this.settle(false);
    const seconds = retryDelay(err, attempt);
    const say = describeRefusal(err);
    this.el.dataset.backoff = err.backoff ? err.backoff.strategy : "";
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
