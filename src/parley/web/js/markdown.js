// Markdown for model output, rendered safely: the text is parsed here and built with
// createElement/text nodes only. Nothing the model writes is ever parsed as HTML, so
// `<script>` or `<img onerror>` in an answer shows as those characters.
//
// Supported: fenced code blocks (``` or ~~~, an open fence renders while streaming),
// headings, paragraphs with line breaks, lists (ordered, unordered), block quotes,
// rules, `inline code`, **bold**, *italic* / _italic_, ~~strike~~, [links](https://…)
// (http, https and mailto only).

import { copyText } from "./clipboard.js";
import { h } from "./dom.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const BULLET = /^(\s*)[-*+]\s+(.*)$/;
const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;

/** A DocumentFragment for the markdown text. */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  for (const block of blocks(text.replace(/\r\n?/g, "\n").split("\n"))) fragment.append(block);
  return fragment;
}

function blocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (line.trim() === "") {
      i += 1;
    } else if ((m = FENCE.exec(line))) {
      const end = closingFence(lines, i + 1, m[1]);
      out.push(codeBlock(lines.slice(i + 1, end).join("\n"), m[2]));
      i = end + 1;
    } else if ((m = HEADING.exec(line))) {
      out.push(h(`h${Math.min(m[1].length + 1, 6)}`, {}, inline(m[2])));
      i += 1;
    } else if (RULE.test(line)) {
      out.push(h("hr"));
      i += 1;
    } else if (QUOTE.test(line)) {
      const start = i;
      while (i < lines.length && QUOTE.test(lines[i])) i += 1;
      const inner = lines.slice(start, i).map((l) => l.replace(QUOTE, ""));
      out.push(h("blockquote", {}, blocks(inner)));
    } else if (BULLET.test(line) || ORDERED.test(line)) {
      i = list(lines, i, out);
    } else {
      const start = i;
      while (i < lines.length && lines[i].trim() !== "" && !startsBlock(lines[i])) i += 1;
      out.push(paragraph(lines.slice(start, i)));
    }
  }
  return out;
}

function startsBlock(line) {
  return (
    FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    BULLET.test(line) || ORDERED.test(line)
  );
}

function closingFence(lines, from, fence) {
  const closing = new RegExp(`^ {0,3}${fence[0] === "`" ? "`" : "~"}{${fence.length},}\\s*$`);
  for (let j = from; j < lines.length; j += 1) if (closing.test(lines[j])) return j;
  return lines.length; // still open: the answer is streaming, show what there is
}

function codeBlock(code, language) {
  const codeEl = h("code", language ? { class: `language-${language}` } : {}, code);
  const figure = h("div", { class: "code-block" });
  const head = h("div", { class: "code-head" }, h("span", {}, language || "code"));
  const copy = h("button", { type: "button", class: "link copy" }, "Copy code");
  copy.addEventListener("click", () => copyText(code, copy, "Copy code"));
  head.append(copy);
  figure.append(head, h("pre", {}, codeEl));
  return figure;
}

function list(lines, i, out) {
  const ordered = ORDERED.test(lines[i]);
  const pattern = ordered ? ORDERED : BULLET;
  const attrs = ordered ? { start: Number(ORDERED.exec(lines[i])[2]) } : {};
  const el = h(ordered ? "ol" : "ul", attrs);
  while (i < lines.length) {
    const m = pattern.exec(lines[i]);
    if (!m) break;
    const item = [m[ordered ? 3 : 2]];
    i += 1;
    while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !pattern.test(lines[i])) {
      item.push(lines[i].trim());
      i += 1;
    }
    el.append(h("li", {}, lineBreaks(item)));
  }
  out.push(el);
  return i;
}

function paragraph(lines) {
  return h("p", {}, lineBreaks(lines));
}

function lineBreaks(lines) {
  const nodes = [];
  lines.forEach((line, n) => {
    if (n) nodes.push(h("br"));
    nodes.push(inline(line));
  });
  return nodes;
}

// Inline spans: the earliest match wins; text between matches stays text.
const SPANS = [
  { re: /`([^`\n]+)`/, make: (m) => h("code", {}, m[1]) },
  { re: /\*\*(?=\S)([^]*?\S)\*\*/, make: (m) => h("strong", {}, inline(m[1])) },
  { re: /__(?=\S)([^]*?\S)__/, make: (m) => h("strong", {}, inline(m[1])) },
  { re: /~~(?=\S)([^]*?\S)~~/, make: (m) => h("del", {}, inline(m[1])) },
  { re: /\*(?=[^\s*])([^*]*?[^\s*])\*/, make: (m) => h("em", {}, inline(m[1])) },
  { re: /(?<![\w])_(?=[^\s_])([^_]*?[^\s_])_(?![\w])/, make: (m) => h("em", {}, inline(m[1])) },
  { re: /\[([^\]\n]+)\]\(([^)\s]+)\)/, make: link },
];

function inline(text) {
  const fragment = document.createDocumentFragment();
  let rest = text;
  while (rest) {
    let best = null;
    for (const span of SPANS) {
      const m = span.re.exec(rest);
      if (m && (best === null || m.index < best.m.index)) best = { m, span };
    }
    if (best === null) {
      fragment.append(document.createTextNode(rest));
      break;
    }
    if (best.m.index) fragment.append(document.createTextNode(rest.slice(0, best.m.index)));
    fragment.append(best.span.make(best.m));
    rest = rest.slice(best.m.index + best.m[0].length);
  }
  return fragment;
}

function link(m) {
  let url;
  try {
    url = new URL(m[2], window.location.href);
  } catch {
    return document.createTextNode(m[0]);
  }
  if (!["http:", "https:", "mailto:"].includes(url.protocol)) return document.createTextNode(m[0]);
  return h(
    "a",
    { href: url.href, target: "_blank", rel: "noopener noreferrer nofollow" },
    inline(m[1]),
  );
}
