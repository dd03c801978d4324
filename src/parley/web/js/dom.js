// Building DOM without HTML strings: text is always a text node, never parsed as markup.

/** h("a", {href, class: "x", onclick}, "text", child) → element. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export const byId = (id) => document.getElementById(id);

/** User or model text set inside other words (a title in a label, a prompt, the tab's
 *  title): wrapped in FIRST STRONG ISOLATE … POP DIRECTIONAL ISOLATE, so a bidi control in
 *  it (U+202E …) cannot reorder the words around it. */
export const isolate = (text) => `\u2068${text}\u2069`;

export function show(el, visible) {
  el.hidden = !visible;
}

/** "in 1 min 5 s" style durations for banners. */
export function duration(seconds) {
  const s = Math.max(0, Math.ceil(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  const hours = Math.floor(m / 60);
  return m % 60 ? `${hours} h ${m % 60} min` : `${hours} h`;
}

export const number = (n) => new Intl.NumberFormat().format(Math.round(n));

const THEME_KEY = "parley-theme";

/** The user's theme on this page (`system`: the device's); remembered in this browser so
 *  the next page opens in it before /api/me answers. */
export function applyTheme(theme) {
  const root = document.documentElement;
  if (theme === "light" || theme === "dark") root.dataset.theme = theme;
  else delete root.dataset.theme;
  try {
    localStorage.setItem(THEME_KEY, theme || "system");
  } catch {
    // storage refused (private mode): the theme holds for this page
  }
}

try {
  applyTheme(localStorage.getItem(THEME_KEY) || "system");
} catch {
  // no storage: the system's theme until /api/me says
}
