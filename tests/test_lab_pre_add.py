"""The pre-add measurement's arguments, table and floors (it times on a GPU only: tests/gpu runs it there)."""

from __future__ import annotations

import pytest

from trt_gn.lab import pre_add

PROG = "python -m trt_gn.lab.pre_add"


@pytest.mark.parametrize("args, message", [
    (["--kinds", "foo"], "--kinds: foo: expected some of bias, residual, bias+residual"),
    (["--shapes", "sd15-unet-320x64,nope"], "--shapes: nope: expected some of " + ", ".join(pre_add.SHAPES_BY_NAME)),
    (["--layouts", ","], "--layouts: none given: expected some of nhwc, nchw"),
    (["--replays", "29"], "--replays must be >= 30 and --rounds >= 1"),
    (["--rounds", "0"], "--replays must be >= 30 and --rounds >= 1"),
])
def test_bad_arguments_are_one_line_errors(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        pre_add.parse_args(args)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"{PROG}: error: {message}"


def test_without_a_gpu_it_is_a_missing_dependency(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the tool would measure")
    assert pre_add.main(["--shapes", "sd15-unet-1280x8"]) == 3
    assert capsys.readouterr().err.strip() == f"{PROG}: error: no CUDA device; this measurement needs a GPU"


def test_floors_follow_the_tensor_passes():
    # fused moves x->y (+ residual in, s out); separate adds a pass writing s and reads it back
    assert {k: pre_add.PASSES[k][0] / pre_add.PASSES[k][1] for k in pre_add.KINDS} == {
        "bias": 0.5, "residual": 0.8, "bias+residual": 0.8}


def test_table_row():
    r = pre_add.Row("vae-dec-128x512", "fp16", "nhwc", "residual", "streaming grid", "streaming grid",
                    40.0, 60.0, 100.0, 125.0, 50.0, 1.5e-3)
    assert r.fused_vs_separate == 0.8 and r.floor == 0.8
    assert pre_add.table([r]).splitlines()[2] == (
        "| vae-dec-128x512 | fp16 | nhwc | residual | streaming grid | 40.0 | 60.0 (1.50x) | 100.0 (2.50x) | "
        "125.0 (3.12x) | 50.0 | 0.80 | 0.80 | 1.50e-03 |")
