"""A web page's readable text: what a reader sees of it, without scripts, styles, markup or
the page's furniture (navigation, forms); blocks on lines of their own. The standard
library's HTML parser (tolerant of broken markup), over a body the fetch already bounded."""

from __future__ import annotations

import re
from html.parser import HTMLParser

SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "nav", "form"})
BLOCKS = frozenset(
    {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
     "footer", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "title"}
)  # fmt: skip


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIPPED:
            self._skipping += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED and self._skipping:
            self._skipping -= 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def readable_text(html: str) -> str:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    lines = (
        re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(reader.parts).split("\n")
    )
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
