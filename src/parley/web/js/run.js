// Following one run's events to its `done`, across dropped connections and reloads.
//
// A run's stream is resumable: each event has an id, and GET /api/runs/{id}/events with
// Last-Event-ID gives exactly the events after it. Reading from the start (no id yet)
// replays the whole answer, so the view is reset first.

import { ApiError, send } from "./api.js";
import { EVENT } from "./events.js";
import { readEvents } from "./sse.js";

export const TERMINAL = new Set(["completed", "cancelled", "failed", "rejected"]);
const MAX_BACKOFF_MS = 10_000;

/**
 * Follow a run until `done`; resolves to the done event's data (null when aborted).
 *
 * - `first`: a Response already open on the stream (the POST's), optional.
 * - `start`: re-sends the POST (same Idempotency-Key: same run) if the connection drops
 *   before the run's id is known.
 * - `runId`: rejoin an existing run.
 * - `on`: {reset, status, delta, error, done, reconnecting} callbacks.
 */
export async function followRun({ first = null, start = null, runId = null, on, signal }) {
  const state = { runId, lastId: null, retryAfter: null };
  let response = first;
  let attempt = 0;
  for (;;) {
    if (response === null) {
      try {
        response = await reopen(state, start, signal);
      } catch (err) {
        if (signal.aborted) return null;
        if (!(err instanceof ApiError) || !err.retryable) throw err;
        on.reconnecting?.(err);
        await pause(backoff(attempt++, err.retryAfter), signal);
        continue;
      }
    }
    if (state.lastId === null) on.reset?.();
    try {
      const done = await consume(response, state, on);
      if (done) return done;
      attempt = 0;
    } catch (err) {
      if (signal.aborted) return null;
      if (err instanceof SyntaxError) throw err; // a malformed event: a bug, not a network blip
    }
    if (signal.aborted) return null;
    response = null;
    on.reconnecting?.(null);
    await pause(backoff(attempt++, state.retryAfter), signal);
    state.retryAfter = null;
  }
}

function reopen(state, start, signal) {
  if (state.runId === null) {
    if (start === null) throw new Error("no run to rejoin");
    return start();
  }
  const headers = state.lastId === null ? {} : { "Last-Event-ID": state.lastId };
  return send("GET", `/api/runs/${encodeURIComponent(state.runId)}/events`, {
    headers,
    accept: "text/event-stream",
    signal,
  });
}

// errors that end a stream, not the run: the client resumes it by Last-Event-ID
const RESUMABLE = new Set(["dependency_unavailable", "server_restarting"]);

async function consume(response, state, on) {
  for await (const ev of readEvents(response)) {
    const data = JSON.parse(ev.data);
    if (ev.id !== null) state.lastId = ev.id;
    if (ev.event === EVENT.STATUS) {
      state.runId = data.run_id;
      on.status?.(data);
    } else if (ev.event === EVENT.DELTA) {
      on.delta?.(data);
    } else if (ev.event === EVENT.REASONING) {
      on.reasoning?.(data);
    } else if (ev.event === EVENT.TOOL_CALL) {
      on.toolCall?.(data);
    } else if (ev.event === EVENT.TOOL_RESULT) {
      on.toolResult?.(data);
    } else if (ev.event === EVENT.TOOL_CONFIRM) {
      on.toolConfirm?.(data);
    } else if (ev.event === EVENT.TOOL_ANSWER) {
      on.toolAnswer?.(data);
    } else if (ev.event === EVENT.ERROR && RESUMABLE.has(data.code)) {
      // the bus went away, or this api process is restarting: resume after this
      state.retryAfter = data.retry_after ?? null;
      return null;
    } else if (ev.event === EVENT.ERROR) {
      on.error?.(data);
    } else if (ev.event === EVENT.DONE) {
      on.done?.(data);
      return data;
    }
  }
  return null; // the body ended without `done`: the connection was cut
}

function backoff(attempt, retryAfter) {
  if (retryAfter !== null && retryAfter !== undefined) return retryAfter * 1000;
  const ms = Math.min(MAX_BACKOFF_MS, 250 * 2 ** attempt);
  return ms / 2 + Math.random() * (ms / 2);
}

/** Sleep, or resolve early when aborted. */
export function pause(ms, signal) {
  return new Promise((resolve) => {
    if (signal && signal.aborted) return resolve();
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
}
