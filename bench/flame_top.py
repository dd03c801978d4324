"""Where a process's time went, from py-spy's collapsed stacks (``--format raw``).

    python bench/flame_top.py build/profiles/relay-split-1000-api.txt [--top 30]

Prints the functions by their own samples (self) and by every sample with them on the stack
(inclusive), each as a share of all samples: what docs/PROFILE.md reads its figures from.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")


def frame_name(frame: str) -> str:
    """``func (path/to/file.py:123)`` → ``func (file.py)``: one name per function."""
    match = re.match(r"^(?P<func>.*?) \((?P<file>[^:)]*)(?::\d+)?\)$", frame)
    if match is None:
        return frame
    return f"{match['func']} ({Path(match['file']).name})"


def package(frame: str) -> str:
    """The package a frame's file belongs to (``sqlalchemy``, ``parley/runs``, ``asyncio``…;
    py-spy names files from their import root)."""
    match = re.match(r"^.*? \((?P<file>[^:)]*)", frame)
    if match is None:
        return "?"
    parts = Path(match["file"]).parts
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    if not parts or parts[0].startswith("<"):
        return "(interpreter)"
    if parts[0] == "parley" and len(parts) > 2:
        return f"parley/{parts[1]}"
    name = parts[0].removesuffix(".py")
    return f"{name} (stdlib)" if name in sys.stdlib_module_names else name


def stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """Each sampled stack of the file (its frames, root first) and its sample count."""
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        frames = [f for f in match["stack"].split(";") if f] if match else []
        if match and frames:
            yield frames, int(match["count"])


def read(path: Path) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """Samples by function (self and inclusive) and by package (self), and in all."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for frames, count in stacks(path):
        names = [frame_name(f) for f in frames]
        total += count
        own[names[-1]] += count
        packages[package(frames[-1])] += count
        for name in set(names):
            inclusive[name] += count
    return own, inclusive, packages, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    own, inclusive, packages, total = read(args.path)
    print(f"{args.path.name}: {total} samples")
    print("\nself, by package:")
    for name, n in packages.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    for title, counts in (("self", own), ("inclusive", inclusive)):
        print(f"\n{title}:")
        for name, n in counts.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
