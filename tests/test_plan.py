"""The planner on described devices (plugin_src/kernels/tests/plan_test.cpp): host C++ only, built with
CMake and run here, without a GPU. It checks the path of the shape list on an H100 and H200 (as
trtgn_describe_plan reported there), on an 8.9 GPU and on a build without sm_90, and the invariants
of every plan over a sweep of the input space."""

from __future__ import annotations

from pathlib import Path

from native_build import run_plan_test

ROOT = Path(__file__).resolve().parents[1]


def test_planner_on_described_devices(tmp_path):
    run = run_plan_test(tmp_path / "build")
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and lines[-1].endswith(" checks, 0 failed"), run.stdout
    assert ("1x512x128x128 fp16 NHWC on an H100: on-chip-grid gnOnChipNHWC cluster=1 split=1 vpt=0 slices=8 vec=8 "
            "blocks=128") in lines
    why = lines[lines.index(next(line for line in lines if line.startswith("1x512x128x128"))) + 1]
    assert why.startswith("  why: clusters: estimate ") and why.endswith(
        " not under 8250; grid: every block's chunk fits its shared memory, in channel slices")
    # Every path was reached on the Hopper descriptions, none of the grids elsewhere.
    for device in ("H100", "H200"):
        counts = next(line for line in lines if line.startswith(f"{device}: "))
        assert all(f"{path} 0," not in counts and f"{path} 0 " not in counts and not counts.endswith(f"{path} 0")
                   for path in ("clusters", "on-chip grid", "streaming grid", "two-pass")), counts
        assert "(rolling 0)" not in counts, counts
    for device in ("8.9 GPU", "H100, build without sm_90"):
        counts = next(line for line in lines if line.startswith(f"{device}: "))
        assert "on-chip grid 0, streaming grid 0 (rolling 0)," in counts, counts


def test_path_names_have_one_table():
    """The names trtgn_describe_plan writes (pathName in group_norm_plan.cpp) are trt_gn.abi.PATHS, in
    order, and the lab's tools take theirs from it."""
    import re

    from trt_gn import abi
    from trt_gn.lab import bench, fuzz

    source = (ROOT / "plugin_src" / "kernels" / "group_norm_plan.cpp").read_text()
    body = source[source.index("const char* pathName(Path p)"):]
    body = body[:body.index("\n}\n")]
    assert tuple(re.findall(r'case Path::k\w+: return "([a-z-]+)";', body)) == abi.PATHS
    assert fuzz.PATHS is abi.PATHS
    assert {bench.plan_summary({"path": p, "cluster": 2, "vpt": 4, "slices": 1, "vec": 8}) for p in abi.PATHS} == {
        "clusters of 2, 4 vec/thread", "on-chip grid", "streaming grid", "two passes, vec 8"}
