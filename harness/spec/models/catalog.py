"""The built-in table of popular models' attention geometry, and how a suite's ``model:`` is
resolved: a config.json path, a built-in ID, or a Hugging Face repo ID.

Built-ins: one JSON file per model in ``configs/`` holding the fields of that model's published
config.json (``configs/SOURCES.md`` names the repository of each and how the file was checked);
they are read by the same parser as a user's config.json. A repo ID (``org/name``) is looked up
in the local Hugging Face cache first (``HF_HUB_CACHE``, else ``HF_HOME``/hub, through
huggingface_hub's own cache lookup), downloaded only when the user allows it
(``HARNESS_ALLOW_DOWNLOAD=1``, the ``[hub]`` extra), else taken from the built-in table when
one of its entries stands for that repository. No network otherwise.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import logging
import os
import re
from functools import lru_cache
from pathlib import Path

from harness.spec.models.config import ModelAttention, ModelError, parse_config, read_config

CONFIG_DIR = Path(__file__).with_name("configs")
SOURCES = CONFIG_DIR / "SOURCES.md"
ALLOW_DOWNLOAD_ENV = "HARNESS_ALLOW_DOWNLOAD"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_log = logging.getLogger(__name__)
_said: set[str] = set()  # repo IDs whose stand-in was already named in this process
_ROW = re.compile(r"^\|\s*([\w.\-]+)\s*\|\s*([\w.\-]+/[\w.\-]+)\s*\|")


def _source_rows() -> dict[str, str]:
    """built-in ID -> repo ID, from the table in SOURCES.md."""
    out = {}
    for line in SOURCES.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


@lru_cache(maxsize=1)
def _entries() -> dict[str, tuple[str, dict]]:
    rows = _source_rows()
    out = {}
    for p in sorted(CONFIG_DIR.glob("*.json")):
        data = json.loads(p.read_text(encoding="utf-8"))
        repo = rows.get(p.stem) or str((data.get("_source") or {}).get("hf_repo", ""))
        out[p.stem] = (repo, data)
    return out


def known_models() -> list[str]:
    return list(_entries())


def hf_repo(model_id: str) -> str:
    return _entries()[model_id][0]


def _repo_key(repo: str) -> str:
    """A repo ID compared without case and without the instruction-tuned suffix (the attention
    geometry of ``Llama-3.1-8B`` and ``Llama-3.1-8B-Instruct`` is the same file)."""
    return re.sub(r"-(instruct|it|chat)$", "", repo.strip().lower())


def builtin_for_repo(repo: str) -> str | None:
    """The built-in ID that stands for a Hugging Face repo ID, or None."""
    key = _repo_key(repo)
    return next((mid for mid, (r, _) in _entries().items() if r and _repo_key(r) == key), None)


def builtin(model_id: str) -> ModelAttention:
    """A built-in entry, parsed; ModelError listing the known ones when there is none."""
    entries = _entries()
    key = model_id.strip().lower()
    if key not in entries:
        raise ModelError(_unknown(model_id))
    repo, data = entries[key]
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return dataclasses.replace(parse_config(data, key, f"{repo} config.json (built-in table)"),
                               origin=f"built-in {key} ({repo or 'no repo'}) sha256 {digest}")


def _unknown(name: str) -> str:
    ids = list(_entries())
    repos = [r for r, _ in _entries().values() if r]
    close = difflib.get_close_matches(name.strip(), ids + repos, n=3, cutoff=0.4)
    close += [c for c in difflib.get_close_matches(name.strip().lower(), [r.lower() for r in repos], n=3, cutoff=0.4)
              if c not in (x.lower() for x in close)]
    hint = f"closest built-in: {', '.join(close[:3])}; " if close else ""
    return (f"unknown model {name[:80]!r}: not a config.json path, not in the local Hugging Face cache, not a "
            f"built-in; {hint}built-in IDs: {', '.join(ids)}. Pass the path of its config.json (the file, or the "
            f"folder that holds it)" + ("" if _download_allowed() else
                                        f", or allow a download with {ALLOW_DOWNLOAD_ENV}=1 (needs the [hub] extra)"))


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps its cache, read now (its own constant is fixed at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _download_allowed() -> bool:
    return os.environ.get(ALLOW_DOWNLOAD_ENV, "") in ("1", "true", "yes")


def _from_hub(repo: str) -> ModelAttention | None:
    """The repo's config.json from the local cache, or downloaded when allowed; None otherwise.
    ModelError when a download is allowed but huggingface_hub is missing (not a silent stand-in)."""
    try:
        import huggingface_hub as hub
    except ImportError:
        if _download_allowed():
            alias = builtin_for_repo(repo)
            raise ModelError(f"model: {repo}: {ALLOW_DOWNLOAD_ENV} is set but huggingface_hub is not installed "
                             "(pip install 'attn-harness[hub]')" + (
                                 f"; or unset {ALLOW_DOWNLOAD_ENV} to use the built-in {alias}" if alias else "")) from None
        return None
    cache = hub_cache_dir()
    try:
        hit = hub.try_to_load_from_cache(repo, "config.json", cache_dir=cache)
    except ValueError:  # huggingface_hub refuses the name as a repo ID: not one
        return None
    if isinstance(hit, str):
        return _hub_origin(read_config(hit, model_id=repo), repo, hit)
    if not _download_allowed():
        return None
    try:
        path = hub.hf_hub_download(repo, "config.json", cache_dir=cache)
    except Exception as e:
        raise ModelError(f"model: {repo}: download of config.json failed: {type(e).__name__}: {str(e)[:200]}") from None
    return _hub_origin(read_config(path, model_id=repo), repo, path)


def _hub_origin(model: ModelAttention, repo: str, path: str) -> ModelAttention:
    """The hub cache's snapshot folder names the revision (``.../snapshots/REV/config.json``)."""
    digest = model.origin.rsplit(" ", 1)[-1]
    return dataclasses.replace(model, origin=f"hf {repo} revision {Path(path).parent.name} sha256 {digest}")


def resolve(id_or_path: str, base_dir: Path | None = None) -> ModelAttention:
    """A config.json path (relative paths: from ``base_dir``, the suite's folder, then the
    working directory), a built-in ID, or a Hugging Face repo ID (cache, download when
    allowed, then the built-in that stands for it)."""
    if not isinstance(id_or_path, str) or not id_or_path.strip():
        raise ModelError(f"model: must be a built-in ID, a repo ID or a config.json path, got {str(repr(id_or_path))[:40]}")
    name = id_or_path.strip()
    for base in ([base_dir] if base_dir is not None else []) + [Path.cwd()]:
        p = Path(name) if Path(name).is_absolute() else base / name
        if p.exists():
            return read_config(p)
    if name.lower() in _entries():
        return builtin(name)
    if _REPO_ID.match(name):
        found = _from_hub(name)
        if found is not None:
            return found
        alias = builtin_for_repo(name)
        if alias is not None:
            if name not in _said:  # one line: the geometry is the built-in's, not a file the user has
                _said.add(name)
                _log.warning("model: %s is not in the local Hugging Face cache; the built-in %s stands for it "
                             "(%s=1 with the [hub] extra downloads its config.json)", name, alias, ALLOW_DOWNLOAD_ENV)
            return builtin(alias)
    if name.endswith(".json") or name.startswith((".", "/", "~")):
        raise ModelError(f"model: {name[:200]}: no such config.json")
    raise ModelError(_unknown(name))
