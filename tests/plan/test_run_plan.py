"""RunFlags.resolve: a run's flags become one RunPlan, once, and the plan carries every derived
option (harness/plan/options.py; docs/architecture.md, "Run options flow down once")."""

from __future__ import annotations

import dataclasses

import pytest

from harness import registry
from harness.cli.flags import UsageError
from harness.cli.run_flags import RunFlags
from harness.plan.options import RunPlan

SUITE = ("suite: s\nclock_regime: sustained\nbackends: [torch-math]\ncases:\n  - name: c\n    num_heads: 4\n"
         "    num_kv_heads: 4\n    head_size: 64\n    batch: [{kind: decode, count: 1, context_len: 32}]\n")


def _backends(seen: list):
    def pick(suite, names, filters):
        seen.append((suite.suite, names, filters))
        return registry.resolve_many(names.split(",") if names else suite.backends)
    return pick


def test_the_plan_holds_every_derived_option(tmp_path):
    src = tmp_path / "s.yaml"
    src.write_text(SUITE)
    seen: list = []
    flags = RunFlags.parse({"suite": str(src), "device": "cpu", "seed": 7, "no_time": True, "case": ["c"],
                            "variant": ["torch-math.x=1"], "batch_spec": ["2q1k"], "cell_timeout": 5,
                            "max_time": 0.25, "strict": True, "shard": "1/2"})
    plan = flags.resolve(_backends(seen), keep_raw=True)
    assert isinstance(plan, RunPlan)
    # pick_backends was asked once, with the suite (overrides applied) and the parsed --variant
    assert seen == [("s", None, {"torch-math": {"x": ["1"]}})]
    assert [b.name for b in plan.backends] == ["torch-math"]
    # --batch-spec applied to the loaded suite: its batch replaced the case's decode batch
    assert [c.name for c in plan.suite.cases] == ["c/2q1k"]
    assert [(g.kind, g.count) for g in plan.suite.cases[0].batch] == [("prefill", 2)]
    assert plan.device.type == "cpu" and plan.execute.devices == ["cpu"] and plan.execute.cell_timeout == 5
    assert plan.run.seed == plan.seed == 7 and plan.run.time is False and plan.run.case_patterns == ["c"]
    assert plan.run.variant_filters is plan.variant_filters  # derived once, shared
    assert plan.run.timing.clock_regime == "sustained" and plan.run.timing.max_time_s == 0.25
    assert plan.run.timing.keep_raw is True
    assert (plan.strict, plan.shard, plan.suite_path) == (True, "1/2", str(src))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 8  # type: ignore[misc]


def test_a_bad_timing_flag_is_one_usage_line(tmp_path):
    src = tmp_path / "s.yaml"
    src.write_text(SUITE)
    flags = RunFlags.parse({"suite": str(src), "device": "cpu", "min_samples": 5, "max_samples": 3})
    with pytest.raises(UsageError, match="^timing options: "):
        flags.resolve(_backends([]))
