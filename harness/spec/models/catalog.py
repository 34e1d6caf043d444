"""The built-in table of popular models' attention geometry: one small JSON file per model in
``configs/``, holding the attention fields of that model's Hugging Face config.json and the
repository it came from. They are read by the same parser as a user's config.json, so the
table is tested by the parser. No network at run time."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from harness.spec.models.config import ModelAttention, ModelError, parse_config, read_config

CONFIG_DIR = Path(__file__).with_name("configs")


@lru_cache(maxsize=1)
def _entries() -> dict[str, tuple[str, dict]]:
    out = {}
    for p in sorted(CONFIG_DIR.glob("*.json")):
        data = json.loads(p.read_text(encoding="utf-8"))
        out[p.stem] = (str(data.get("_source", {}).get("hf_repo", "")), data)
    return out


def known_models() -> list[str]:
    return list(_entries())


def hf_repo(model_id: str) -> str:
    return _entries()[model_id][0]


def builtin(model_id: str) -> ModelAttention:
    """A built-in entry, parsed; ModelError listing the known ones when there is none."""
    entries = _entries()
    key = model_id.strip().lower()
    if key not in entries:
        raise ModelError(
            f"unknown model {model_id[:80]!r}; built-in: {', '.join(entries)}; or pass the path of a Hugging Face"
            " config.json (the file, or the model's folder that holds it)")
    repo, data = entries[key]
    return parse_config(data, key, f"{repo} config.json (built-in table)")


def resolve(id_or_path: str, base_dir: Path | None = None) -> ModelAttention:
    """A built-in ID, or a path to a config.json (relative paths: from ``base_dir``, the suite's
    folder, then the working directory)."""
    if not isinstance(id_or_path, str) or not id_or_path.strip():
        raise ModelError(f"model: must be a built-in ID or a config.json path, got {str(repr(id_or_path))[:40]}")
    looks_like_path = "/" in id_or_path or id_or_path.endswith(".json") or id_or_path.startswith(".")
    if looks_like_path or id_or_path.strip().lower() not in _entries():
        for base in ([base_dir] if base_dir is not None else []) + [Path.cwd()]:
            p = Path(id_or_path) if Path(id_or_path).is_absolute() else base / id_or_path
            if p.exists():
                return read_config(p)
        if looks_like_path:
            raise ModelError(f"model: {id_or_path[:200]}: no such config.json")
    return builtin(id_or_path)
