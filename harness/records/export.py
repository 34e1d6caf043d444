"""Results as one flat table, one row per cell: ``harness export RESULTS --csv FILE`` /
``--parquet FILE`` and ``harness.api.load``. The columns are ``rows_frame``'s (docs/api.md) with
every remaining mapping flattened with dots too; in files, list values are JSON text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from harness.records.fileio import atomic_path

if TYPE_CHECKING:
    import pandas as pd


class ExportError(ValueError):
    """Bad input to ``harness export``: one line, exit 2."""


def flat_frame(paths: Iterable[str | Path]) -> "pd.DataFrame":
    """The rows of ``paths`` (results folders / .jsonl files) as one flat frame: rows_frame's
    columns, mappings it keeps (``case_params``, ``layout``, ``variant_axes``) flattened, a
    ``results`` column naming the path each row came from; ``attrs["case_legend"]`` kept."""
    import pandas as pd

    from harness.records.results import flatten, read_rows, rows_frame

    rows, origin = [], []
    for p in paths:
        got = read_rows(p)  # FileNotFoundError / ValueError name the file
        rows += got
        origin += [str(p)] * len(got)
    df = rows_frame(rows)
    nested = [c for c in df.columns if df[c].map(lambda v: isinstance(v, dict)).any()]
    if nested:
        extra: list[dict[str, Any]] = []
        for rec in df[nested].to_dict("records"):
            out: dict[str, Any] = {}
            for c, v in rec.items():
                if isinstance(v, dict):
                    flatten(c, v, out)
            extra.append(out)
        legend = df.attrs.get("case_legend", {})
        df = pd.concat([df.drop(columns=nested), pd.DataFrame(extra, index=df.index)], axis=1)
        df.attrs["case_legend"] = legend
    if len(df):
        df.insert(0, "results", origin)
    return df


def _file_ready(df: "pd.DataFrame") -> "pd.DataFrame":
    """Lists (tags, raw samples) as JSON text: CSV and parquet cells hold one value."""
    df = df.copy()
    for c in df.columns:
        if df[c].map(lambda v: isinstance(v, (list, tuple))).any():
            df[c] = df[c].map(lambda v: json.dumps(list(v)) if isinstance(v, (list, tuple)) else v)
    return df


def export(paths: list[str | Path], csv: str | Path | None = None, parquet: str | Path | None = None) -> Path:
    """Write the flat table to ``csv`` or ``parquet`` (parquet needs pyarrow); returns the path."""
    if (csv is None) == (parquet is None):
        raise ExportError("give one of --csv FILE or --parquet FILE")
    if parquet is not None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ExportError("--parquet needs pyarrow (pip install pyarrow), which is not installed; "
                              "--csv needs nothing") from None
    try:
        df = _file_ready(flat_frame(paths))
    except (FileNotFoundError, ValueError) as e:
        raise ExportError(str(e)) from None
    target = csv if csv is not None else parquet
    assert target is not None  # exactly one was given (checked above)
    out = Path(target)
    with atomic_path(out) as tmp:  # written whole, then renamed: never half a file
        if csv is not None:
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
    return out
