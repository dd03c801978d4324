// Copying text, with a visible confirmation on the button that did it.

import { h } from "./dom.js";

const SAID_MS = 1600;

/** Copy `text`; `button` says "Copied" (or "Copy failed") for a moment, then `label`. */
export async function copyText(text, button, label) {
  const copied = await write(text);
  button.textContent = copied ? "Copied" : "Copy failed";
  button.classList.add("copied");
  setTimeout(() => {
    button.textContent = label;
    button.classList.remove("copied");
  }, SAID_MS);
}

async function write(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return legacyCopy(text); // no clipboard API (a page served over plain http to a LAN address)
  }
}

function legacyCopy(text) {
  const area = h("textarea", { class: "visually-hidden", "aria-hidden": "true", readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  try {
    return document.execCommand("copy");
  } catch {
    return false;
  } finally {
    area.remove();
  }
}
