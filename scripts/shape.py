"""Checks the code's shape: no module under src/parley over 400 lines (migrations aside),
no function over 40 lines. Prints what is over and exits 1, else prints a summary."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


def main(root: Path) -> int:
    over: list[str] = []
    modules = [p for p in sorted(root.rglob("*.py")) if "migrations" not in p.parts]
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
    for line in over:
        print(line)
    if over:
        return 1
    print(
        f"shape: {len(modules)} modules, none over {MAX_MODULE_LINES} lines, "
        f"no function over {MAX_FUNCTION_LINES} lines"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "src/parley")))
