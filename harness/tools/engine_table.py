"""Writes harness/analysis/engine_table.json: the built-in backends' engine names and plain
counterparts, as their classes declare them. The readers use it for results whose run.json
predates ``backend_facts``; tests/tools/test_engine_table.py checks it equals the declarations.

    python -m harness.tools.engine_table   # after changing a backend's engine_names
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parent.parent / "analysis" / "engine_table.json"


def declared() -> dict[str, Any]:
    """The built-in backends' facts (the entry points this project's own distribution registers),
    in registry order."""
    from importlib.metadata import entry_points, packages_distributions

    from harness import registry
    from harness.records.engine_facts import facts_of

    own = set(packages_distributions().get("harness", []))
    ours = {ep.name for ep in entry_points(group="attn_harness.backends")
            if (dist := getattr(ep, "dist", None)) is not None and dist.name in own}
    names = [n for n in registry.known_backends() if n in ours]
    return {"backend_facts": facts_of(registry.resolve(n) for n in names)}


def text() -> str:
    return json.dumps(declared(), indent=1, sort_keys=False) + "\n"


def main() -> None:
    TABLE.write_text(text(), encoding="utf-8")
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
