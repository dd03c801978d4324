// The names of a run's stream events, as the server sends them (parley.runs.events.KINDS;
// scripts/shape.py fails when the two lists differ).
export const EVENT = Object.freeze({
  STATUS: "status",
  DELTA: "delta",
  REASONING: "reasoning",
  TOOL_CALL: "tool_call",
  LOGPROBS: "logprobs",
  TOOL_RESULT: "tool_result",
  TOOL_CONFIRM: "tool_confirm",
  TOOL_ANSWER: "tool_answer",
  ERROR: "error",
  DONE: "done",
});
