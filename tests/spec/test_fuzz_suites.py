"""Random mutations of valid suites: every one is either valid or one clear line and exit 2,
never a traceback, a hang or a file outside the results folder."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
FALLBACK = "invalid suite (unexpected"  # spec.py's last-resort message: a check is missing

TINY = """suite: tiny
description: fuzz seed
backends: [torch-math, sdpa]
variants:
  torch-math: {}
defaults:
  dtype: bfloat16
  block_size: 16
cases:
  - name: gqa
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    block_size: [16, 32]
    sliding_window: 64
    shared_prefix: {length: 32, groups: 1}
    tags: [a, b]
    batch:
      - kind: decode
        count: 3
        context_len: {dist: uniform, low: 10, high: 60}
      - kind: extend
        count: 1
        query_len: {dist: list, values: [7, 9]}
        context_len: {dist: lognormal, median: 20, sigma: 0.5, min: 1, max: 90}
  - name: prefill
    num_heads: 4
    num_kv_heads: 4
    head_size: 16
    sweep: zip
    dtype: [float16, bfloat16]
    kv_cache_dtype: [auto, fp8_e4m3]
    batch:
      - kind: prefill
        count: 2
        query_len: {dist: normal, mean: 12, std: 3, max: 20}
"""

BOMB = """suite: bomb
x0: &a [l, l, l, l, l, l, l, l, l, l]
x1: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
x2: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
x3: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
x4: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
x5: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
x6: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
x7: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
cases: *h
"""

VALUES = ["[1, 2]", "{a: 1}", "'text'", "true", "null", "-5", "0", "1e400", "10000000000000000000000000000",
          ".nan", "-.inf", "[]", "{}", "*x", "&x 3", "!!binary aGVsbG8=", "2001-12-14", "[[[[1]]]]", "''",
          "'../../etc/passwd'", "pkg:Backend", "'[/x]'", "\"\\x00\"", "65537", "4194305", "1023.5"]


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    i = rng.randrange(len(lines))
    # op 9 keeps the suite valid (a comment line): since duplicate keys are rejected, most line
    # swaps are errors, and the fuzzer must still see valid mutants on both seeds.
    op = rng.randrange(10)
    if op == 0:  # delete a line
        del lines[i]
    elif op == 1:  # another value, of another type
        head, sep, _ = lines[i].partition(": ")
        lines[i] = (head + ": " if sep else lines[i] + " ") + rng.choice(VALUES)
    elif op == 2:  # wrong nesting
        lines[i] = (" " * rng.choice([0, 1, 2, 3, 4, 6, 8])) + lines[i].lstrip()
    elif op == 3:  # unknown key at some level
        lines.insert(i, " " * rng.choice([0, 2, 4, 6, 8]) + f"{rng.choice(['zzz', 'Name', '1', 'cases', 'batch'])}: 1")
    elif op == 4:  # random bytes
        pos = rng.randrange(len(text) + 1)
        blob = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))).decode("latin-1")
        return text[:pos] + blob + text[pos:]
    elif op == 5:  # duplicate or swap lines
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == 6:  # numbers to extremes
        out = []
        for tok in text.split(" "):
            if tok.strip().isdigit() and rng.random() < 0.5:
                tok = tok.replace(tok.strip(), rng.choice(["-1", "0", "99999999999", "3.5", "65536", "1e9"]))
            out.append(tok)
        return " ".join(out)
    elif op == 7:  # aliases: an anchored value reused, or a bomb spliced in
        if rng.random() < 0.5:
            return BOMB.replace("cases: *h", "") + text.replace("suite: tiny\n", "")
        head, sep, value = lines[i].partition(": ")
        if sep and value:
            lines[i] = f"{head}: &v {value}"
            j = rng.randrange(len(lines))
            h2, s2, _ = lines[j].partition(": ")
            if s2:
                lines[j] = f"{h2}: *v"
    elif op == 8:  # truncate
        return text[: rng.randrange(len(text))]
    else:  # a comment line, indented anywhere
        lines.insert(i, " " * rng.choice([0, 2, 4, 6]) + "# fuzz")
    return "\n".join(lines) + "\n"


def _check_one(path: Path, capsys) -> int:
    rc = main(["validate", str(path)])
    captured = capsys.readouterr()
    if rc == 2:
        err = captured.err.strip()
        assert err.startswith("error:") and len(err.splitlines()) == 1, err
        assert "Traceback" not in err and FALLBACK not in err, err
    else:
        assert rc == 0 and "valid" in captured.out, (rc, captured)
    return rc


@pytest.mark.parametrize("base", ["tiny", "decode"])
def test_fuzz_mutations_in_process(tmp_path, capsys, base):
    text = TINY if base == "tiny" else (ROOT / "suites" / "decode.yaml").read_text()
    rng = random.Random(1234 if base == "tiny" else 99)
    path = tmp_path / "m.yaml"
    outcomes = {0: 0, 2: 0}
    ran = 0
    for n in range(250 if base == "tiny" else 160):
        mutated = text
        for _ in range(rng.randint(1, 3)):
            mutated = _mutate(mutated, rng)
        path.write_bytes(mutated.encode("utf-8", "surrogateescape") if isinstance(mutated, str) else mutated)
        rc = _check_one(path, capsys)
        outcomes[rc] += 1
        if rc == 0 and base == "tiny" and ran < 5:
            # Valid mutants also run (tiny budget, no timing), without a traceback.
            ran += 1
            out = tmp_path / f"run{n}"
            rc_run = main(["run", str(path), "--device", "cpu", "--backends", "torch-math", "--no-time",
                           "--no-isolation", "--quiet", "--cpu-max-gflop", "0.001", "--out", str(out)])
            err = capsys.readouterr().err
            assert rc_run in (0, 2) and "Traceback" not in err, err
            if rc_run == 0:
                assert (out / "results.jsonl").exists()
    assert outcomes[2] > 50 and outcomes[0] > 5, outcomes  # the fuzzer exercises both sides


@pytest.mark.parametrize("text, message", [
    (BOMB, "YAML nodes"),
    ("suite: x\ncases: &c [*c]\n", "recursive YAML alias"),
    ("suite: x\ncases: " + "[" * 3000 + "]" * 3000 + "\n", "nested"),
    (TINY.replace("suite: tiny", "suite: ../../escape"), "names the results folder"),
    (TINY.replace("backends: [torch-math, sdpa]", "backends: ['os:system']"), "command line"),
    (TINY.replace("head_size: 16", "head_size: [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120]")
         .replace("num_heads: 4\n", "num_heads: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]\n")
         .replace("sweep: zip\n", "seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]\n"
                  "    block_size: [16, 32, 64, 128, 256]\n")
         .replace("dtype: [float16, bfloat16]", "dtype: float16").replace("kv_cache_dtype: [auto, fp8_e4m3]", ""),
     "sweep expands to"),
    (TINY.replace("count: 3", "count: 60000").replace("high: 60", "high: 4000000"), "KV tokens"),
    (TINY.replace("head_size: 32", "head_size: 32\n    scale: .inf"), "finite number"),
    (TINY.replace("name: gqa", "name: '[/x] [bold]'\n    zzz: 1"), "[/x] [bold]"),
])
def test_hostile_suites_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "h.yaml"
    path.write_text(text)
    rc = main(["validate", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1 and FALLBACK not in err, err


def test_suite_file_size_is_bounded(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(TINY + "# " + "x" * (5 << 20) + "\n")
    assert main(["validate", str(path)]) == 2
    assert "at most" in capsys.readouterr().err


def test_fuzz_through_a_subprocess(tmp_path):
    """Exit code and stderr as a shell sees them, for a few mutants (one of them a bomb)."""
    rng = random.Random(7)
    paths = []
    for i, text in enumerate([BOMB, _mutate(_mutate(TINY, rng), rng), "suite: x\ncases: [\n"]):
        p = tmp_path / f"s{i}.yaml"
        p.write_text(text)
        paths.append(p)
    code = ("import sys; from harness.cli import main\n"
            "rcs = [main(['validate', p]) for p in sys.argv[1:]]\n"
            "print(rcs, file=sys.stderr); sys.exit(max(rcs))")
    r = subprocess.run([sys.executable, "-c", code, *map(str, paths)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    rcs = eval(r.stderr.strip().splitlines()[-1])
    assert len(errors) == rcs.count(2) and rcs[0] == 2 and rcs[2] == 2 and r.returncode == 2
    assert "YAML nodes" in errors[0]
