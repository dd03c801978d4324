"""scripts/mutations.py stays runnable: every mutation's code is in its file, once, and every
test it names exists (a renamed test or moved line would leave a mutation nobody runs)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "parley_mutations", ROOT / "scripts" / "mutations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("parley_mutations", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutation_applies_once_and_names_tests_that_exist() -> None:
    wrong = []
    for m in _script().MUTATIONS:
        if (ROOT / m.path).read_text().count(m.old) != 1:
            wrong.append(f"{m.id}: its code is not once in {m.path}")
        for test in m.tests:
            path, _, name = test.partition("::")
            source = (ROOT / path).read_text() if (ROOT / path).exists() else ""
            if not source or (name and not re.search(rf"def {re.escape(name)}\(", source)):
                wrong.append(f"{m.id}: no test {test}")
    assert not wrong, wrong
