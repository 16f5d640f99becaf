"""Property tests over the whole accepted input space (trt_gn.lab.fuzz's cases, drawn by hypothesis):
any N <= 64, H, W <= 512, C <= 4096, G any divisor of C, every dtype, layout, affine kind,
activation, eps (0 included), input scale and offset, one NaN or Inf now and then. Each case is
checked against the float64 reference, and records the path it ran (trtgn_describe_plan): the
last test proves every path ran for every dtype and layout."""

from __future__ import annotations

from collections import Counter

import pytest
from gpu_helpers import GPU
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trt_gn.lab import fuzz

pytestmark = GPU

# (path, dtype, layout) -> cases, filled by test_random_cases
RAN: Counter = Counter()
CELLS_RUN: set = set()
MIN_PER_PATH = 2


class HypothesisPick:
    """draw_case's drawing interface over hypothesis' data strategy (so failures shrink)."""

    def __init__(self, data):
        self.data = data

    def integer(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))

    def choice(self, options):
        return self.data.draw(st.sampled_from(options))

    def unit(self):
        return self.data.draw(st.floats(0.0, 1.0, exclude_max=True))


# Each aim spreads its cases over one path's region of the input space (trt_gn.lab.fuzz.draw_case);
# "any" draws from all of it. Every aim draws a pre-add in half its cases (every path runs one).
# The path is what the library's plan says, whatever the aim.
@pytest.mark.parametrize("aim", fuzz.AIMS)
@pytest.mark.parametrize("layout", fuzz.LAYOUTS)
@pytest.mark.parametrize("dtype", fuzz.DTYPES)
@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_cases(dtype, layout, aim, data):
    case = fuzz.draw_case(HypothesisPick(data), aim=aim, dtype=dtype, layout=layout, max_elements=1 << 25)
    plan, message = fuzz.run_case(case)
    RAN[(plan["path"], dtype, layout)] += 1
    CELLS_RUN.add((dtype, layout))
    assert message is None, f"trt-gn fuzz --case '{case.spec()}' [{plan['path']} {plan['kernel']}]: {message}"


@pytest.mark.parametrize("layout", fuzz.LAYOUTS)
@pytest.mark.parametrize("dtype", fuzz.DTYPES)
def test_every_path_ran(dtype, layout):
    if (dtype, layout) not in CELLS_RUN:
        pytest.skip(f"test_random_cases[{dtype}-{layout}] did not run in this session")
    counts = {path: RAN[(path, dtype, layout)] for path in fuzz.PATHS}
    assert all(k >= MIN_PER_PATH for k in counts.values()), f"cases per path, {dtype} {layout}: {counts}"
