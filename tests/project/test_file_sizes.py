"""No source file grows past 600 lines (docs/architecture.md): split it by job before it does."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600


def test_no_source_file_over_the_limit():
    over = []
    for top in ("attn_contract", "backends", "harness", "ci", "tests"):
        for path in sorted((ROOT / top).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > LIMIT:
                over.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not over, "split these by job:\n" + "\n".join(over)
