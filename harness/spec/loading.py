"""A suite file -> parsed YAML -> ``parse_suite``: size and encoding checks, PyYAML's safe
loader with duplicate keys rejected, the alias/depth guard, and one ``SpecError`` for every
way a file can be wrong (never a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.spec.errors import SpecError
from harness.spec.expand import parse_suite
from harness.spec.limits import MAX_SUITE_BYTES, yaml_size
from harness.spec.suite_model import Suite


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error naming
    both lines (plain PyYAML keeps the last one silently: `num_heads: 8` then `num_heads: 16`
    would run 16). Keys brought in by a `<<:` merge may still be overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first_line.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                line = key_node.start_mark.line + 1
                if earlier is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} at lines {earlier} and {line}", key_node.start_mark)
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def load_suite(path: str | Path, override: dict[str, Any] | None = None) -> Suite:
    """Read and validate a suite file (or a vLLM attention-benchmark study, converted); every
    failure is a ``SpecError``. ``override``: see ``parse_suite``."""
    p = Path(path)
    if p.is_dir():
        inside = sorted(str(f) for f in p.glob("*.yaml"))[:6]
        hint = f", e.g. {', '.join(inside)}" if inside else ""
        raise SpecError(f"{path}: is a directory, not a suite file; give one YAML file{hint}")
    if not p.is_file():
        raise SpecError(f"{path}: no such suite file")
    try:
        size = p.stat().st_size
        if size > MAX_SUITE_BYTES:
            raise SpecError(f"{path}: {size:,} bytes; a suite file is at most {MAX_SUITE_BYTES:,}")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read: {e}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise SpecError(f"{path}: malformed YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).strip().splitlines()[0]
        if isinstance(e, yaml.reader.ReaderError):
            where = f" (character {e.position + 1})"
        raise SpecError(f"{path}: malformed YAML{where}: {' '.join(str(problem).split())}") from None
    yaml_size(data, str(path))
    notes: list[str] = []
    try:
        from harness.spec.vllm_study import from_study, is_study

        if is_study(data):
            data, notes = from_study(data, str(path))
        return parse_suite(data, str(path), override=override, notes=notes)
    except SpecError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as e:
        # Last line of defence so a user never sees a traceback; tests/spec/test_fuzz_suites.py
        # fails on this message, so every input that reaches it gets a proper check.
        raise SpecError(f"{path}: invalid suite (unexpected {type(e).__name__}: {str(e)[:200]})") from None
