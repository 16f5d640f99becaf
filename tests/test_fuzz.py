"""The fuzz command's input space and options, without a GPU (tests/gpu/test_gpu_fuzz.py runs it)."""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile

import pytest

from trt_gn.lab import fuzz


def test_drawn_cases_stay_in_the_accepted_space_and_reach_every_region():
    rng = random.Random(5)
    cases = [fuzz.draw_case(fuzz.RandomPick(rng)) for _ in range(3000)]
    for case in cases:
        assert 1 <= case.n <= fuzz.MAX_N and 1 <= case.h <= fuzz.MAX_HW and 1 <= case.w <= fuzz.MAX_HW
        assert 1 <= case.c <= fuzz.MAX_C and case.c % case.groups == 0
        assert case.elements <= fuzz.MAX_ELEMENTS
        assert fuzz.parse_case(case.spec()) == case
    # every dtype, layout, affine kind, activation and eps (0 too), C off the vector width with
    # many groups (the shapes of the two-pass fix), tensors past what the SMs hold (streaming)
    assert {c.dtype for c in cases} == set(fuzz.DTYPES) and {c.layout for c in cases} == set(fuzz.LAYOUTS)
    assert {c.affine for c in cases} == set(fuzz.AFFINES) and {c.activation for c in cases} == set(fuzz.ACTIVATIONS)
    assert {c.eps for c in cases} == set(fuzz.EPSILONS) and {c.special for c in cases} == {"-", "nan", "inf"}
    assert sum(c.c % 8 != 0 and c.groups >= 9 for c in cases) > 100
    assert sum(c.elements >= 1 << 24 for c in cases) > 100
    assert len({c.groups for c in cases}) > 200  # G from every divisor, not a short list
    assert min(c.scale for c in cases) < 0.02 and max(c.scale for c in cases) > 50
    assert min(c.offset for c in cases) < -50 and max(c.offset for c in cases) > 50


def test_pre_add_draws_reach_every_kind_and_keep_the_old_cases():
    rng = random.Random(7)
    cases = [fuzz.draw_case(fuzz.RandomPick(rng)) for _ in range(2000)]
    kinds = {c.pre_add.kind for c in cases}
    assert kinds == set(fuzz.PRE_ADD_KINDS)
    assert 0.4 < sum(c.pre != "-" for c in cases) / len(cases) < 0.6
    biased = [c for c in cases if c.pre_add.bias]
    assert {c.pre_add.bias_fp32 for c in biased} == {False, True}
    assert all(c.pre_add.bias_fp32 for c in biased if c.affine == "fp32")
    # an fp32 bias beside an affine of x's 16-bit dtype (pre_bias_float32), and one of x's dtype
    assert {c.pre_add.bias_fp32 for c in biased if c.affine == "x" and c.dtype != "fp32"} == {False, True}
    for case in cases:
        assert fuzz.parse_case(case.spec()) == case
        assert case.spec().count(",") == (14 if case.pre != "-" else 13)
    # Without the pre-add draws, a seed gives the cases it gave before there was one.
    a, b = random.Random(8), random.Random(8)
    without = [fuzz.draw_case(fuzz.RandomPick(a), pre_add=False) for _ in range(300)]
    assert all(c.pre == "-" for c in without)
    with_pre = [fuzz.draw_case(fuzz.RandomPick(b)) for _ in range(1)]
    assert with_pre[0].spec().split(",")[:14] == without[0].spec().split(",")[:14]


def test_pre_add_gaps_name_each_missing_kind():
    from collections import Counter

    counts = Counter({(p, k): 5 for p in fuzz.PATHS for k in fuzz.PRE_ADD_KINDS})
    assert fuzz.pre_add_gaps(counts, 5) == []
    counts[("two-pass", "bnc+r+s")] = 2
    counts[("clusters", "r")] = 0
    assert fuzz.pre_add_gaps(counts, 5) == ["clusters r: 0", "two-pass bnc+r+s: 2"]
    # A path without the pre-add is not asked for it.
    for path in set(fuzz.PATHS) - set(fuzz.abi.PRE_ADD_PATHS):
        counts[(path, "r")] = 0
    assert fuzz.pre_add_gaps(counts, 5) == ["clusters r: 0", "two-pass bnc+r+s: 2"]


def test_size_aims_respect_smaller_budgets():
    rng = random.Random(6)
    for aim in fuzz.AIMS:
        for _ in range(200):
            case = fuzz.draw_case(fuzz.RandomPick(rng), aim=aim, max_elements=1 << 22)
            assert case.elements <= 1 << 22


@pytest.mark.parametrize("text,message", [
    ("1,2,3", "a case has 13 to 15 comma-separated fields"),
    ("1,32,2,2,8,fp16,nhwc,x,silu,1e-5,1,0,7,-,s", r"^pre-add 's': s \(sum_out\) needs a bias or r$"),
    ("1,32,2,2,8,fp16,nhwc,x,silu,1e-5,1,0,7,-,r+r", r"^pre-add 'r\+r': 'r' is not one of bc, bnc, bc32, bnc32, r, s \(each once\)$"),
    ("1,32,2,2,8,fp16,nhwc,x,silu,1e-5,1,0,7,-,bc+bnc", "'bnc' is not one of"),
    ("1,32,2,2,8,fp16,nhwc,x,silu,1e-5,1,0,7,-,bq", "'bq' is not one of"),
    ("1,32,2,2,8,fp16,nhwc,fp32,silu,1e-5,1,0,7,-,bnc+r",
     r"^pre-add 'bnc\+r': beside an fp32 affine the bias is fp32: bc32/bnc32$"),
    ("1,30,2,2,8,fp16,nhwc,x,silu,1e-5,1,0,7", "sizes must be > 0 and G must divide C"),
    ("1,32,2,2,8,fp64,nhwc,x,silu,1e-5,1,0,7", "dtype 'fp64' is not one of"),
    ("1,32,2,2,8,fp16,nhwc,x,gelu,1e-5,1,0,7", "activation 'gelu' is not one of"),
])
def test_parse_case_rejects_bad_specs(text, message):
    with pytest.raises(ValueError, match=message):
        fuzz.parse_case(text)


def test_parse_case_takes_an_fp32_bias_beside_any_affine():
    for affine in fuzz.AFFINES:
        case = fuzz.parse_case(f"1,32,2,2,8,fp16,nhwc,{affine},silu,1e-5,1,0,7,-,bc32+r")
        assert case.pre_add.bias_fp32 and case.affine == affine


def python_m(module, *args):
    # From a folder without trt_gn, with the package under test on PYTHONPATH (as test_cli does).
    from cli_helpers import cli_env

    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120,
                          cwd=tempfile.gettempdir(), env=cli_env())


def run(*args):
    return python_m("trt_gn.lab.fuzz", *args)


def test_command_line_errors():
    r = run("--case", "1,2,3")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("python -m trt_gn.lab.fuzz: error: --case: a case has 13 to 15 comma-separated fields")
    r = run("--max-elements", "100")
    assert r.returncode == 2 and r.stderr.strip() == (
        "python -m trt_gn.lab.fuzz: error: --cases and --show must be >= 0, --max-elements >= 4096")
    assert "--min-per-path" in run("--help").stdout
    r = run("--plans-only")
    assert r.returncode == 2 and r.stderr.strip() == "python -m trt_gn.lab.fuzz: error: --plans-only needs --plans CSV"


def test_compare_plans(tmp_path):
    """Two builds' dumps compared case by case, on the keys both have."""
    old, new, other = tmp_path / "old.csv", tmp_path / "new.csv", tmp_path / "other.csv"
    old.write_text("case,plan,result\na,path=clusters vec=8,ok\nb,path=two-pass vec=1,ok\n")
    new.write_text("case,plan,result\na,path=clusters vec=8 workspace=0 why=clusters: estimate 3218 under 8250,ok\n"
                   "b,path=two-pass vec=1 workspace=9,ok\n")
    other.write_text("case,plan,result\na,path=clusters vec=8,ok\nb,path=on-chip-grid vec=8,ok\n")
    same = python_m("trt_gn.lab.compare_plans", str(old), str(new))
    assert same.returncode == 0 and same.stdout == "2 cases, 0 plans differ\n"
    differ = python_m("trt_gn.lab.compare_plans", str(old), str(other))
    assert differ.returncode == 1
    assert differ.stdout == "b\n  old: path=two-pass vec=1\n  new: path=on-chip-grid vec=8\n2 cases, 1 plans differ\n"


def test_without_gpu_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: tests/gpu/test_gpu_fuzz.py runs the cases")
    r = run("--cases", "3")
    assert r.returncode == 3
    no_gpu = "error: no CUDA device (torch.cuda.is_available() is False)\n  hint: run it on a machine with a CUDA GPU\n"
    assert r.returncode == 3 and r.stderr == f"python -m trt_gn.lab.fuzz: {no_gpu}"
    r = python_m("trt_gn.cli", "fuzz", "--cases", "3")  # trt-gn fuzz: the same run, the same contract
    assert r.returncode == 3 and r.stderr == f"trt-gn fuzz: {no_gpu}"


def test_cli_fuzz_options():
    """`trt-gn fuzz` takes the options of python -m trt_gn.lab.fuzz and reports in the CLI's format."""
    r = python_m("trt_gn.cli", "fuzz", "--plans-only")
    assert r.returncode == 2 and r.stderr == "trt-gn fuzz: error: --plans-only needs --plans CSV\n"
    assert "--min-per-path" in python_m("trt_gn.cli", "fuzz", "--help").stdout


def test_coverage_gaps_name_each_missing_cell():
    from collections import Counter

    counts = Counter({(p, d, l): 5 for p in fuzz.PATHS for d in fuzz.DTYPES for l in fuzz.LAYOUTS})
    counts[("streaming-grid", "bf16", "nchw")] = 1
    assert fuzz.coverage_gaps(counts, 5) == ["streaming-grid bf16 nchw: 1"]
    assert fuzz.coverage_gaps(counts, 1) == []


def test_kernel_gaps_name_each_missing_cell():
    from collections import Counter

    assert fuzz.COVERED_KERNELS == {"gnRollingNCHW": ("nchw",)}
    counts = Counter({("gnRollingNCHW", d, "nchw"): 5 for d in fuzz.DTYPES})
    counts[("gnRollingNCHW", "fp32", "nchw")] = 2
    counts[("gnRollingNCHW", "fp16", "nhwc")] = 9  # a layout the kernel does not take is not asked for
    assert fuzz.kernel_gaps(counts, 5) == ["gnRollingNCHW fp32 nchw: 2"]
    assert fuzz.kernel_gaps(counts, 2) == []
    assert fuzz.kernel_gaps(Counter(), 1) == [f"gnRollingNCHW {d} nchw: 0" for d in fuzz.DTYPES]
