"""`harness diag clocks`: the continuous loop's settled clock is read as rows are (the mean)."""

from harness.tools.diag.clocks import loop_settled_mhz


def test_loop_settled_clock_is_the_mean_of_the_last_second() -> None:
    # At the power limit the clock steps between levels; the median of these reads is the upper
    # level (1500), the mean is 1440. Reads before the last second (a boost of 1980) are left out.
    trace = [[0.0, 1980.0, 700.0], [0.5, 1980.0, 700.0]]
    trace += [[1.2 + 0.1 * i, mhz, 699.0] for i, mhz in enumerate([1500, 1350, 1500, 1350, 1500])]
    assert loop_settled_mhz(trace) == 1440.0
    assert loop_settled_mhz([]) is None
