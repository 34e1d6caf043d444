"""`harness recommend` on a CPU run says it was a CPU run, not "GPU: <the CPU's name>
(capability unknown)"."""

from __future__ import annotations

from helpers.typed_rows import CFG, check, host, timing

from harness.cli import main
from harness.records.results import ResultRow, ResultWriter, write_header

DECODE = {"num_reqs": 4, "num_tokens": 4, "num_decode": 4, "num_prefill": 0, "num_extend": 0,
          "max_query_len": 1, "max_seq_len": 200, "mean_seq_len": 120.0, "prefix_groups": 0}


def test_recommend_on_a_cpu_run_says_cpu(tmp_path, capsys):
    out = tmp_path / "run"
    with ResultWriter(out) as w:
        for backend, t in (("sdpa", 50.0), ("torch-math", 80.0)):
            w.write(ResultRow(suite="smoke", case="decode", backend=backend, status="pass", device="cpu", config=CFG,
                              batch=DECODE, check=check(True), host=host(), timing=timing(t, t - 1, t + 1, method="wall")))
    write_header(out, {"device": {"type": "cpu", "name": "Intel(R) Xeon(R) Processor"}, "torch": "2.13.0"})
    assert main(["recommend", str(out)]) == 0
    md = capsys.readouterr().out
    assert "CPU run (Intel(R) Xeon(R) Processor)" in md
    assert "GPU: Intel" not in md and "capability unknown" not in md
