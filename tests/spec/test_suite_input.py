"""Bad suites that used to get through: `harness validate` and `harness run` reject each with
one line naming the file and the field, exit 2, nothing written."""

from __future__ import annotations

import json
import shlex

import pytest

from harness.cli import main

GOOD = """\
suite: s
cases:
  - name: a
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: 2
        context_len: 20
"""


def _bad(header: str = "", **fields: str) -> str:
    text = header + GOOD
    for k, v in fields.items():
        text = text.replace(f"    {k}: ", f"    {k}: {v} #", 1)
    return text


CASES = [
    (_bad("backends: [torch-math, flash-atn]\n"), "field backends[1]: unknown backend 'flash-atn'"),
    (_bad("variants: {flash-atn: {fa_version: [3]}}\n"), "field variants.flash-atn: unknown backend 'flash-atn'; known: "),
    (_bad("variants: {torch-math: {fa_version: [3]}}\n"),
     "field variants.torch-math: torch-math has no variant axis 'fa_version'"),
    (_bad("variants: {flash-attn: {fa_version: [5]}}\n"),
     "field variants.flash-attn: fa_version=5: not a value of flash-attn's axis 'fa_version'"),
    (_bad(num_heads="true"), "field num_heads: Input should be a valid integer, got True"),
    (_bad(num_heads="2.5"), "field num_heads: Input should be a valid integer, got 2.5"),
    (_bad(num_heads='"8"'), "field num_heads: Input should be a valid integer, got '8'"),
    (_bad(head_size="32.0"), "field head_size: Input should be a valid integer"),
    (GOOD.replace("    head_size: 32\n", "    head_size: 32\n    num_heads: 16\n"),
     "duplicate key 'num_heads' at lines 4 and 7"),
    (GOOD.replace("        count: 2\n", "        count: 2\n        count: 3\n"), "duplicate key 'count' at lines 9 and 10"),
]


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("text, message", CASES)
def test_validate_and_run_reject_the_same_suites_with_file_and_field(tmp_path, capsys, command, text, message):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    out = tmp_path / "res"
    argv = [command, str(p)] + (["--device", "cpu", "--backends", "torch-math", "--out", str(out), "--quiet"]
                                if command == "run" else [])
    rc = main(argv)
    err = capsys.readouterr().err
    one = " ".join(err.split())
    assert rc == 2 and message in one and one.startswith(f"error: {p}") and "Traceback" not in err, err
    assert not out.exists()


def test_the_good_suite_passes_both(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("variants: {flash-attn: {fa_version: [3, 4]}}\nbackends: [torch-math]\n" + GOOD)
    assert main(["validate", str(p)]) == 0
    assert main(["run", str(p), "--device", "cpu", "--out", str(tmp_path / "r"), "--quiet", "--no-time",
                 "--no-isolation"]) == 0


def test_yaml_merge_keys_may_still_override(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(GOOD.replace("  - name: a\n", "  - &base\n    name: a\n") + "  - <<: *base\n    name: b\n")
    assert main(["validate", str(p)]) == 0


def test_variant_flag_is_checked_like_the_suite(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(GOOD)
    rc = main(["run", str(p), "--device", "cpu", "--backends", "torch-math", "--out", str(tmp_path / "r"),
               "--variant", "torch-math.fa_version=3"])
    assert rc == 2 and "--variant torch-math: torch-math has no variant axis 'fa_version'" in capsys.readouterr().err


def test_a_directory_given_as_a_suite_says_so(tmp_path, capsys):
    (tmp_path / "one.yaml").write_text(GOOD)
    for command in (["validate"], ["run"]):
        assert main([*command, str(tmp_path)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "is a directory, not a suite file" in err and "one.yaml" in err


def test_reproducer_of_a_case_named_with_glob_characters_reruns_exactly_that_cell(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(GOOD.replace("name: a", "name: 'c*'") + GOOD.split("cases:\n")[1].replace("name: a", "name: cx")
                 + GOOD.split("cases:\n")[1].replace("name: a", "name: 'c[x]'"))
    out = tmp_path / "res"
    assert main(["run", str(p), "--device", "cpu", "--backends", "torch-math", "--out", str(out), "--quiet",
                 "--no-time", "--no-isolation"]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {r["case"] for r in rows} == {"c*", "cx", "c[x]"}
    for row in rows:
        again = tmp_path / f"again-{len(list(tmp_path.iterdir()))}"
        argv = shlex.split(row["reproducer"])[1:] + ["--out", str(again), "--quiet", "--no-time", "--no-isolation"]
        assert main(argv) == 0
        rerun = [json.loads(x) for x in (again / "results.jsonl").read_text().splitlines()]
        assert [r["case"] for r in rerun] == [row["case"]], row["reproducer"]
    # a pattern that is no case's exact name is still a glob
    glob_out = tmp_path / "glob"
    assert main(["run", str(p), "--device", "cpu", "--backends", "torch-math", "--case", "c?", "--out", str(glob_out),
                 "--quiet", "--no-time", "--no-isolation"]) == 0
    assert {json.loads(x)["case"] for x in (glob_out / "results.jsonl").read_text().splitlines()} == {"c*", "cx"}
