"""`harness diag clocks`: the continuous loop's settled clock is read as rows are (the mean)."""

from harness.tools.diag.clocks import loop_settled_mhz


def test_loop_settled_clock_is_the_mean_of_the_last_second() -> None:
    # At the power limit the clock steps between levels; the median of these reads is the upper
    # level (1500), the mean is 1440. Reads before the last second (a boost of 1980) are left out.
    trace = [[0.0, 1980.0, 700.0], [0.5, 1980.0, 700.0]]
    trace += [[1.2 + 0.1 * i, mhz, 699.0] for i, mhz in enumerate([1500, 1350, 1500, 1350, 1500])]
    assert loop_settled_mhz(trace) == 1440.0
    assert loop_settled_mhz([]) is None


def test_the_probe_reads_its_harness_row_as_rows_are_read() -> None:
    # `harness diag clocks` has a timing record, not a row: clock_value is sm_clock's rule on it
    from harness.records.clocks import clock_value, sm_clock
    from harness.records.timing_parts import ClockStats
    from helpers.typed_rows import gpu_row

    both = {"min": 1425.0, "median": 1500.0, "max": 1680.0, "mean": 1455.0}
    assert clock_value(ClockStats.model_validate(both)) == 1455.0  # the mean where recorded
    assert clock_value(ClockStats.model_validate(both), "median") == 1500.0
    old = {"min": 1425.0, "median": 1500.0, "max": 1680.0}  # schema 5 and before: no mean
    assert clock_value(ClockStats.model_validate(old)) == 1500.0 and clock_value(None) is None
    assert sm_clock(gpu_row("c", 1.0, sm_mhz=both)) == clock_value(ClockStats.model_validate(both))
