"""The shared atomic write and markdown-table helpers."""

from __future__ import annotations

import pytest

from harness.report import markdown
from harness.records.fileio import OutputPathError, atomic_copy, atomic_write_text


def test_atomic_write_replaces_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "out.json"
    assert atomic_write_text(target, "first\n") == target  # parent made
    atomic_write_text(target, "second\n")
    assert target.read_text(encoding="utf-8") == "second\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_atomic_write_failure_keeps_old_file_and_no_temp(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(target, "bad \ud800 surrogate")  # fails while writing the temporary file
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_write_without_mkdir_needs_the_folder(tmp_path):
    with pytest.raises(OutputPathError, match="does not exist"):
        atomic_write_text(tmp_path / "missing" / "x.txt", "x", mkdir=False)
    assert not (tmp_path / "missing").exists()


def test_atomic_copy(tmp_path):
    src = tmp_path / "a.yaml"
    src.write_bytes(b"suite: s\n\xc3\xa9\n")
    dst = atomic_copy(src, tmp_path / "b.yaml")
    assert dst.read_bytes() == src.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]


def test_markdown_table_escapes_cells():
    lines = markdown.table(["a", "b|c"], [[1, "x|y"], ["two\nlines", None]])
    assert lines == ["| a | b\\|c |", "|---|---|", "| 1 | x\\|y |", "| two lines | None |"]


def test_markdown_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown.table(["a", "b", "c"], [["1", "2"]])


def test_atomic_path_renames_on_success_and_removes_on_error(tmp_path):
    from harness.records.fileio import atomic_path

    target = tmp_path / "out.csv"
    with atomic_path(target) as tmp:
        tmp.write_text("a,b\n")
        assert not target.exists()  # nothing under the final name until the block ends
    assert target.read_text() == "a,b\n"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "a,b\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
