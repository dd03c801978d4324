"""Checks the code's shape (``make lint``); prints what is wrong and exits 1, else a summary:

* no module under src/parley over 400 lines (migrations aside), no function over 40 lines;
* no import circle between modules (imports for type checking included: a circle there is
  still two concepts that each need the other);
* no module but the composition root and the CLI imports the root settings
  (``parley.config``): each takes its own section;
* the web client's names of a run's stream events (``web/js/events.js``) are the server's
  (``parley.runs.events.KINDS``).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


def sizes(root: Path, modules: list[Path]) -> list[str]:
    over: list[str] = []
    for path in modules:
        source = path.read_text()
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES:
            over.append(f"{path}: {lines} lines (module)")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > MAX_FUNCTION_LINES:
                    over.append(f"{path}:{node.lineno}: {node.name} is {length} lines")
    return over


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def circles(root: Path, modules: list[Path]) -> list[str]:
    names = {module_name(root, p): p for p in modules}
    graph = {n: imported(n, p, set(names)) for n, p in names.items()}
    return [" -> ".join([*c, c[0]]) for c in _strongly_connected(graph) if len(c) > 1]


def _strongly_connected(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """Tarjan's algorithm, iteratively: each strongly connected set of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w not in index or w in on_stack), None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    yield sorted(component)
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            else:
                low[node] = min(low[node], index[nxt])


# the composition root and the CLI (its subcommands' handlers) read the root settings;
# every other module takes its own section (``parley.config`` composes them)
ROOT_SETTINGS_READERS = {
    "parley.config",
    "parley.services",
    "parley.connections",
    "parley.cli",
    "parley.capacity.cli",
    "parley.accounts.admin",
    "parley.archive.admin",
    "parley.audit.admin",
    "parley.portability.admin",
    "parley.safety.admin",
}


def root_settings(root: Path, modules: list[Path]) -> list[str]:
    """Modules other than the composition root and the CLI that import the root settings."""
    names = {module_name(root, p): p for p in modules}
    return [
        f"{path}: imports the root settings (take the package's own section instead)"
        for name, path in names.items()
        if name not in ROOT_SETTINGS_READERS and "parley.config" in imported(name, path, set(names))
    ]


def event_names(root: Path) -> list[str]:
    """The stream's event names in the web client and in ``parley.runs.events``."""
    client = re.findall(r'^\s+\w+: "(\w+)",$', (root / "web/js/events.js").read_text(), re.M)
    source = (root / "runs/events.py").read_text()
    types = re.findall(r"kind: ClassVar\[EventKind\] = EventKind\.(\w+)", source)
    server = [t.lower() for t in types]
    if sorted(client) != sorted(server):
        return [f"web/js/events.js names {sorted(client)}; the server sends {sorted(server)}"]
    return []


def main(root: Path) -> int:
    modules = [p for p in sorted(root.rglob("*.py")) if "migrations" not in p.parts]
    wrong = (
        sizes(root, modules)
        + circles(root, modules)
        + root_settings(root, modules)
        + event_names(root)
    )
    for line in wrong:
        print(line)
    if wrong:
        return 1
    print(
        f"shape: {len(modules)} modules, none over {MAX_MODULE_LINES} lines, no function "
        f"over {MAX_FUNCTION_LINES} lines, no import circle, the root settings read only by "
        "the composition root and the CLI; the client's event names are the server's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "src/parley")))
