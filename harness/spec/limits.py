"""Input bounds of a suite, and the YAML size measure that enforces the node and depth limits.

A suite is hand-written configuration, so anything past these is a mistake or hostile input,
rejected before it can hang the loader or exhaust memory.
"""

from __future__ import annotations

import re
from typing import Any

from harness.spec.errors import SpecError

MAX_TOKENS_PER_REQUEST = 1 << 22  # 4M tokens: anything larger is a typo, not a workload
MAX_REQUESTS = 65536
# Input bounds: a suite is hand-written configuration, so anything past these is a mistake or
# hostile input, rejected before it can hang the loader or exhaust memory.
MAX_SUITE_BYTES = 4 << 20
MAX_YAML_NODES = 200_000  # nodes after alias expansion (billion-laughs guard)
MAX_YAML_DEPTH = 64
MAX_CASES = 10_000  # expanded cases in one suite
MAX_KV_TOKENS_PER_CASE = 1 << 28  # upper bound of sum(seq_len) over a case's requests
MAX_SEED = 2**63 - 1
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def yaml_size(data: Any, source: str = "<suite>") -> int:
    """Nodes ``data`` has once its YAML aliases are expanded; raises SpecError for recursive
    aliases, nesting deeper than MAX_YAML_DEPTH or more than MAX_YAML_NODES nodes (a "billion
    laughs" document is a few lines of aliases that expand to billions of nodes).
    Linear in the document: shared (aliased) nodes are measured once."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        kids = [k for kv in node.items() for k in kv] if isinstance(node, dict) else node
        nid = id(node)
        if done:
            on_path.discard(nid)
            sizes[nid] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            depths[nid] = 1 + max((depths.get(id(k), 0) for k in kids), default=0)
            if sizes[nid] > MAX_YAML_NODES:
                raise SpecError(f"{source}: the suite expands to more than {MAX_YAML_NODES:,} YAML nodes"
                                " (YAML aliases repeated too often?)")
            if depths[nid] > MAX_YAML_DEPTH:
                raise SpecError(f"{source}: YAML nested deeper than {MAX_YAML_DEPTH} levels")
            continue
        if nid in sizes:
            continue
        if nid in on_path:
            raise SpecError(f"{source}: recursive YAML alias (a node that contains itself)")
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if isinstance(k, (dict, list)) and id(k) not in sizes)
    return sizes.get(id(data), 1)
