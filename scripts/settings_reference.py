"""Write docs/SETTINGS.md, the settings reference, from the settings models themselves.

    .venv/bin/python scripts/settings_reference.py          # write docs/SETTINGS.md
    .venv/bin/python scripts/settings_reference.py --check  # exit 1 if it is out of date

Every field of ``parley.config.Settings`` and of the sections it composes: its TOML key, its
environment variable, its type, its default and its description. ``tests/test_settings_
reference.py`` fails when the page and the models part, so the page is never stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "SETTINGS.md"

HEAD = """# Settings

Generated from the settings models by `scripts/settings_reference.py`; do not edit by hand.

Settings come from (highest first) the command line, `PARLEY_*` environment variables, the
TOML file named by `--config` / `PARLEY_CONFIG_FILE`, then the defaults below. A section's
field is `[section] key` in TOML and `PARLEY_SECTION__KEY` in the environment. Every value is
validated at start-up: a wrong one stops the process with a message naming it.
"""


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    text = text.replace("typing.", "").replace("pydantic.types.", "")
    return text.replace("parley.", "").replace("|", "or")


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined:
        if field.default_factory is None:
            return "(required)"
        return "(computed)" if not callable(field.default_factory) else "(built)"
    value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    text = repr(value.value if hasattr(value, "value") else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _section_model(field: FieldInfo) -> type[BaseModel] | None:
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _rows(model: type[BaseModel], prefix: str, env: str) -> tuple[list[str], list[Any]]:
    rows, sections = [], []
    for name, field in model.model_fields.items():
        section = _section_model(field)
        if section is not None:
            sections.append((f"{prefix}{name}", f"{env}{name.upper()}__", section, field))
            continue
        key = f"`{prefix}{name}`"
        variable = f"`{env}{name.upper()}`"
        kind = _cell(_type_name(field.annotation))
        rows.append(
            f"| {key} | {variable} | {kind} | `{_cell(_default(field))}` | "
            f"{_cell(field.description or '')} |"
        )
    return rows, sections


def render() -> str:
    from parley.config import Settings

    out = [HEAD]
    queue: list[tuple[str, str, type[BaseModel], FieldInfo | None]] = [
        ("", "PARLEY_", Settings, None)
    ]
    while queue:
        prefix, env, model, field = queue.pop(0)
        rows, sections = _rows(model, f"{prefix}." if prefix else "", env)
        title = f"[{prefix}]" if prefix else "Top level"
        out.append(f"\n## {title}\n")
        described = (field.description if field is not None else None) or model.__doc__
        if described:
            out.append(f"\n{_cell(described)}\n")
        if rows:
            out.append("\n| key | environment | type | default | what it is |")
            out.append("\n| --- | --- | --- | --- | --- |\n")
            out.append("\n".join(rows) + "\n")
        queue.extend(sections)
    return "".join(out) + _former_names()


def _former_names() -> str:
    """The flat names of before the sections, which still read (``settings_aliases.py``)."""
    from parley.settings_aliases import ALIASES

    out = [
        "\n## Former names\n\nThe flat names below still read, as keywords, top-level TOML keys "
        "and `PARLEY_*` variables, and mean the section's field; a section's own name wins.\n",
        "\n| former name | environment | now |\n| --- | --- | --- |\n",
    ]
    for name, (section, field) in ALIASES.items():
        out.append(f"| `{name}` | `PARLEY_{name.upper()}` | `{section}.{field}` |\n")
    return "".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args()
    page = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE} is out of date: run scripts/settings_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE} ({len(page.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
