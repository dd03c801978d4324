// The shared-link page: the server sends every message as escaped plain text; answers are
// rendered here as Markdown (built from text nodes only, see markdown.js). No requests, no
// live updates: the page is the snapshot.

import { renderMarkdown } from "./markdown.js";

for (const el of document.querySelectorAll(".message.assistant .content.plain")) {
  const text = el.textContent;
  el.replaceChildren(renderMarkdown(text));
  el.classList.replace("plain", "markdown");
}
