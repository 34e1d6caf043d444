"""The cold-L2 flush is judged against a reference flush, not only by a ratio (issue 44).

The CPU tests feed the rule the probe times the H200 recorded on 2026-12-06
(reports/h200/2026-12-06/loan1/interleave-8, every cold row's ``timing.cold_check.probes``): the
read flush of twice the L2 took the half-L2 probe from 12.6 us (hot) to 15.6 us, ratio 1.24, and
the write flush to 17.6 us. The GPU test checks the chosen flush on the card itself."""

from __future__ import annotations

import pytest
import torch

from harness.timing.cold_l2 import (AUTO_ORDER, FLUSH_FACTOR, MIN_COLDNESS, REFERENCE_FACTOR, choose_flush,
                                    cold_l2_label, judge_probe, probe_name)

H200_READ = (12.61, 15.62)  # hot, cold after the read flush (us)
H200_WRITE = (12.54, 17.60)
H200_REFERENCE = 17.7  # what a flush of 8x the L2 would leave; the write flush's level, assumed here


def probe(hot: float, cold: float, ref: float | None, method: str, factor: int = FLUSH_FACTOR) -> dict:
    return {"method": method, "l2_factor": factor, "hot_us": hot, "cold_us": cold, **judge_probe(hot, cold, ref)}


def test_a_flush_that_passes_the_ratio_but_leaves_data_behind_is_not_verified():
    p = judge_probe(*H200_READ, H200_REFERENCE)
    assert p["ratio"] >= 1.2  # the old rule passed it
    assert not p["verified"] and p["coldness"] < MIN_COLDNESS
    assert "incomplete" in p["reason"] and "59%" in p["reason"]
    w = judge_probe(*H200_WRITE, H200_REFERENCE)
    assert w["verified"] and w["coldness"] > 0.95 and "reason" not in w


def test_the_ratio_still_applies_and_an_unknown_reference_leaves_it_alone():
    p = judge_probe(13.2, 15.7, None)  # the H200 of 2026-11-29: ratio 1.19
    assert not p["verified"] and p["coldness"] is None and "not 1.2x slower" in p["reason"]
    assert judge_probe(12.5, 17.6, None)["verified"]
    # a reference no colder than hot says nothing about completeness: the ratio decides
    assert judge_probe(12.5, 17.6, 12.0)["verified"] and judge_probe(12.5, 17.6, 12.0)["coldness"] is None


def test_auto_takes_the_first_complete_flush_and_says_why():
    probes = {"read": probe(*H200_READ, H200_REFERENCE, "read"),
              "write": probe(*H200_WRITE, H200_REFERENCE, "write"),
              probe_name("write", REFERENCE_FACTOR): probe(12.5, 17.7, H200_REFERENCE, "write", REFERENCE_FACTOR)}
    name, why = choose_flush(probes, "auto")
    assert name == "write" and why.startswith("read not verified (59% of the reference's cold)") and "write verified" in why
    # where read is complete, read (no write-back near the timed call)
    probes["read"] = probe(12.6, 17.5, H200_REFERENCE, "read")
    assert choose_flush(probes, "auto") == ("read", "read verified")
    # an explicit method is used as asked, verified or not
    probes["read"] = probe(*H200_READ, H200_REFERENCE, "read")
    assert choose_flush(probes, "read") == ("read", "asked for")


def test_auto_falls_back_to_the_big_write_flush_then_to_the_coldest():
    big = probe_name("write", REFERENCE_FACTOR)
    assert [probe_name(m, f) for m, f in AUTO_ORDER] == ["read", "write", big]
    probes = {"read": probe(12.6, 14.0, 17.7, "read"), "write": probe(12.6, 15.0, 17.7, "write"),
              big: probe(12.6, 17.7, 17.7, "write", REFERENCE_FACTOR)}
    assert choose_flush(probes, "auto")[0] == big
    probes[big] = probe(12.6, 11.0, 17.7, "write", REFERENCE_FACTOR)  # the reference's own probe went wrong
    name, why = choose_flush(probes, "auto")
    assert name == "write" and why.startswith("none verified") and "using write, the coldest" in why


def test_the_label_names_the_flush_size_and_its_coldness():
    ok = {"method": "write", "l2_factor": 8, "verified": True, **judge_probe(12.5, 17.7, 17.7)}
    assert cold_l2_label(ok) == "verified (write flush of 8x the L2, probe ratio 1.42 >= 1.2, 100% of the reference's cold)"
    bad = {"method": "read", "l2_factor": 2, "selection": "asked for", **judge_probe(*H200_READ, H200_REFERENCE)}
    assert cold_l2_label(bad) == "not verified (read flush, probe ratio 1.24, 59% of the reference's cold; asked for)"


@pytest.mark.gpu
def test_the_chosen_flush_evicts_what_the_reference_evicts():
    from harness.timing.cold_l2 import L2Flusher, select_flush

    dev = torch.device("cuda")
    check = select_flush(dev, "auto")
    assert check["verified"], check
    assert check["coldness"] >= MIN_COLDNESS and check["reference_us"] > check["hot_us"] * 1.2
    refs = [check["probes"][probe_name(m, REFERENCE_FACTOR)] for m in ("read", "write")]
    assert max(r["cold_us"] for r in refs) == pytest.approx(check["reference_us"])
    f = L2Flusher(dev, check["method"], check["l2_factor"])
    assert f.nbytes >= FLUSH_FACTOR * check["probe_mib"] * 2 * 2**20 - 2**20  # at least twice the L2
    with pytest.raises(ValueError, match="at least twice"):
        L2Flusher(dev, "read", 1)


def test_the_flush_flag_reaches_the_timing_options_and_refuses_other_values(tmp_path, capsys):
    from harness.cli.entry import main
    from harness.cli.run_flags import RunFlags

    cpu = torch.device("cpu")
    assert RunFlags.parse({"suite": "s.yaml"}).timing_options(cpu).flush_method == "auto"
    assert RunFlags.parse({"suite": "s.yaml", "flush": "write"}).timing_options(cpu).flush_method == "write"
    with pytest.raises(SystemExit) as e:  # argparse's own one-line usage error
        main(["run", "ci/smoke.yaml", "--device", "cpu", "--flush", "rotate", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "--flush" in capsys.readouterr().err and not (tmp_path / "r").exists()
