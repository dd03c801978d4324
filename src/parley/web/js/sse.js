// Server-sent events read from a fetch Response (EventSource cannot POST or send headers).

/**
 * Yield {id, event, data} for each event of the stream; comments (pings) are skipped.
 * Ends when the body ends; throws when the connection breaks.
 */
export async function* readEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = blank();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      for (const line of lines) {
        if (line === "") {
          if (event.data.length) yield { id: event.id, event: event.event, data: event.data.join("\n") };
          event = blank();
        } else if (!line.startsWith(":")) {
          field(event, line);
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function blank() {
  return { id: null, event: "message", data: [] };
}

function field(event, line) {
  const colon = line.indexOf(":");
  const name = colon < 0 ? line : line.slice(0, colon);
  let value = colon < 0 ? "" : line.slice(colon + 1);
  if (value.startsWith(" ")) value = value.slice(1);
  if (name === "data") event.data.push(value);
  else if (name === "event") event.event = value;
  else if (name === "id") event.id = value;
}
