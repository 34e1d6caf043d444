"""Suite parsing: sweeps expand into named cases; bad input fails with a message naming the
file, the case and the field."""

import pytest
import yaml

from harness.spec import SpecError, load_suite, parse_suite

BASE = {
    "suite": "t",
    "cases": [
        {
            "name": "c",
            "num_heads": 8,
            "num_kv_heads": 2,
            "head_size": 64,
            "batch": [{"kind": "decode", "count": 2, "context_len": 100}],
        }
    ],
}


def _suite(**case_overrides):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["cases"][0].update(case_overrides)
    return data


def test_product_sweep_names_every_combination():
    s = parse_suite(_suite(block_size=[16, 32], dtype=["float16", "bfloat16"]))
    assert [c.name for c in s.cases] == [
        "c[block_size=16,dtype=float16]",
        "c[block_size=16,dtype=bfloat16]",
        "c[block_size=32,dtype=float16]",
        "c[block_size=32,dtype=bfloat16]",
    ]
    assert {(c.block_size, c.dtype) for c in s.cases} == {(16, "float16"), (16, "bfloat16"), (32, "float16"), (32, "bfloat16")}


def test_zip_sweep_and_nested_batch_field():
    data = _suite(sweep="zip", num_heads=[8, 32], num_kv_heads=[8, 8])
    data["cases"][0]["batch"][0]["count"] = [1, 4]
    s = parse_suite(data)
    assert [(c.num_heads, c.num_kv_heads, c.batch[0].count) for c in s.cases] == [(8, 8, 1), (32, 8, 4)]


def test_zip_needs_equal_lengths():
    with pytest.raises(SpecError, match="zip needs lists of one length"):
        parse_suite(_suite(sweep="zip", num_heads=[8, 16], block_size=[16, 32, 64]))


def test_defaults_merge_and_int_lengths_are_fixed():
    data = _suite()
    data["defaults"] = {"dtype": "float16", "block_size": 32}
    s = parse_suite(data)
    c = s.cases[0]
    assert c.dtype == "float16" and c.block_size == 32
    assert c.batch[0].context_len.dist == "fixed" and c.batch[0].context_len.value == 100


@pytest.mark.parametrize(
    "override, message",
    [
        ({"num_heads": 6, "num_kv_heads": 4}, "must be a multiple of num_kv_heads"),
        ({"block_size": 0}, "field block_size"),
        ({"head_size": "big"}, "field head_size"),
        ({"dtype": "float64"}, "field dtype"),
        ({"bogus": 1}, "unknown field"),
        ({"batch": [{"kind": "decode", "count": 2}]}, "decode needs context_len"),
        ({"batch": [{"kind": "prefill", "count": 1, "query_len": 0}]}, "query_len must be at least 1"),
        ({"batch": [{"kind": "decode", "context_len": {"dist": "uniform", "low": 9, "high": 3}}]}, "must not exceed"),
        ({"shared_prefix": {"length": 10, "groups": 1}}, "multiple of block_size"),
        ({"block_size": []}, "empty list"),
    ],
)
def test_bad_cases_name_the_field(override, message):
    with pytest.raises(SpecError) as e:
        parse_suite(_suite(**override), "suites/x.yaml")
    assert message in str(e.value)
    assert "suites/x.yaml" in str(e.value)
    assert "case 'c" in str(e.value)


def test_malformed_yaml_reports_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("suite: x\ncases:\n  - name: [unclosed\n")
    with pytest.raises(SpecError, match=r"bad.yaml: malformed YAML \(line \d+"):
        load_suite(p)


def test_top_level_problems(tmp_path):
    with pytest.raises(SpecError, match="a suite must be a mapping"):
        parse_suite([1, 2])
    with pytest.raises(SpecError, match="missing required key 'cases'"):
        parse_suite({"suite": "x"})
    with pytest.raises(SpecError, match="unknown top-level key"):
        parse_suite({**BASE, "extra": 1})
    with pytest.raises(SpecError, match="no such suite file"):
        load_suite(tmp_path / "missing.yaml")


def test_duplicate_names_rejected():
    data = _suite()
    data["cases"].append(data["cases"][0])
    with pytest.raises(SpecError, match="duplicate case name"):
        parse_suite(data)


def test_committed_suites_validate():
    from pathlib import Path

    from harness import registry

    known = registry.known_backends()
    for path in sorted(Path(__file__).resolve().parents[2].glob("suites/*.yaml")):
        suite = load_suite(path)
        assert suite.cases, path
        # Every case turns into the layer config a backend is asked about, with its own shape.
        for c in suite.cases:
            cfg = c.attention_config()
            assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_size) == (c.num_heads, c.num_kv_heads, c.head_size)
        # Backends and variant axes a suite names exist: a typo would silently run nothing.
        for name in suite.backends or []:
            assert name in known, f"{path.name}: backend {name!r} is not registered"
        for name, axes in suite.variants.items():
            declared = registry.resolve(name).variant_axes
            for axis, values in axes.items():
                assert axis in declared, f"{path.name}: {name} has no variant axis {axis!r}"
                allowed = {str(v) for v in declared[axis]}
                assert {str(v) for v in values} <= allowed, f"{path.name}: {name}.{axis}={values}"
