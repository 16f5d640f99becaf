"""The cost model's lab tool (trt_gn/lab/costmodel.py): its formula against the planner's own
estimates (plan_test built with TRT_GN_DEBUG_PLANS, which forces every cluster plan and prints
each estimate), the fit on a synthetic sweep whose best constants are known, and its errors."""

from __future__ import annotations

import csv
import hashlib
import math
from pathlib import Path

import pytest

from trt_gn.lab import costmodel

from native_build import run_plan_test

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "plugin_src" / "kernels" / "group_norm_plan.cpp"


def test_formula_matches_the_planner(tmp_path):
    """Every forced cluster plan plan_test prints (the four kinds of kernels, fp16 and fp32, both
    layouts): the Python formula with the constants read from the source gives the planner's
    estimate; and plan_test's forced-plan checks (accepted, rejected with their messages) pass."""
    run = run_plan_test(tmp_path / "build", "-DTRT_GN_DEBUG_PLANS=ON")
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and lines[-1].endswith(" checks, 0 failed"), "\n".join(
        line for line in lines if not line.startswith("forced-estimate: "))
    constants = costmodel.read_constants(SOURCE)
    kinds, checked = set(), 0
    for line in lines:
        if not line.startswith("forced-estimate: "):
            continue
        head, why = line.removeprefix("forced-estimate: ").split(" why=", 1)
        plan = {k: int(v) for k, v in (item.split("=") for item in head.split())}
        assert why.startswith(costmodel.FORCED_MARK + "; clusters: estimate "), why
        cost = costmodel.parse_forced_why(why)
        mine = costmodel.estimate(constants.table, cost["kind"], cost["clusters"], cost["sms"], plan["cluster"],
                                  plan["vpt"], plan["threads"])
        assert mine == pytest.approx(cost["estimate"], abs=0.006), line
        kinds.add(cost["kind"])
        checked += 1
    assert checked > 300 and kinds == set(costmodel.KIND_ROWS)


def test_constants_round_trip_through_the_printed_lines(tmp_path):
    """The lines fit prints, pasted over the source's, read back as the same constants."""
    current = costmodel.read_constants(SOURCE)
    changed = costmodel.Constants({k: tuple(v * 1.37 for v in row) for k, row in current.table.items()}, 12345.0)
    text, header = SOURCE.read_text(), SOURCE.with_name("group_norm_plan.h").read_text()
    lines = costmodel.cpp_lines(costmodel.rounded(changed)).split("\n")
    table, threshold = "\n".join(lines[:-1]), lines[-1]
    start = text.index("constexpr CostConstants kCost[] = {")
    end = text.index("\n};\n", start) + 3
    (tmp_path / "group_norm_plan.cpp").write_text(text[:start] + table + text[end:])
    h_start = header.index("constexpr double kClustersOverGridCost = ")
    (tmp_path / "group_norm_plan.h").write_text(header[:h_start] + threshold + header[header.index("\n", h_start):])
    back = costmodel.read_constants(tmp_path / "group_norm_plan.cpp")
    assert back == costmodel.rounded(changed)
    assert back.table["nchw"][1] == 959.0 and back.threshold == 12340.0  # 700 * 1.37; four digits


# ---- a synthetic sweep: times from the same formula with other constants ----

# The sweep's "GPU": the planner's formula with these constants, in ns, and the grid at this threshold.
TRUE = costmodel.Constants({
    "nhwc-group": (3000.0, 150.0, 0.05, 2.0, 3.0, 900.0, 150.0),
    "nhwc-set": (3000.0, 500.0, 0.05, 2.0, 3.0, 900.0, 150.0),
    "nchw": (3000.0, 250.0, 0.05, 2.0, 3.0, 900.0, 150.0),
    "nhwc-narrow": (3000.0, 400.0, 0.05, 2.0, 3.0, 100.0, 800.0),
}, 11000.0)
SMS = 132


def _plans(units: int, lanes: int):
    """(K, VPT, threads) of clusterShape's loop for `units` vectors of `lanes` lanes (no forcing)."""
    quantum = 32 // math.gcd(lanes, 32)
    for k in (1, 2, 4, 8):
        for vpt in (1, 2, 4, 8, 16):
            rows = -(-units // (k * vpt))
            rows = -(-rows // quantum) * quantum
            if rows * lanes <= 512 and k * rows * vpt - units < rows * vpt:
                yield k, vpt, rows * lanes


def synthetic_rows(current: costmodel.Constants) -> list[dict]:
    """Eight shapes of each kind, two dtypes, one layout; each cluster plan's time is TRUE's estimate
    and the grid takes TRUE's threshold, so TRUE (and what picks as it does) leaves no case above its
    fastest plan. The estimate column is the planner's with `current`, as a sweep would record."""
    rows = []
    for kind in costmodel.KIND_ROWS:
        for i, (units, lanes, clusters) in enumerate(((256, 5, 64), (1024, 5, 64), (2048, 1, 64), (512, 2, 128),
                                                      (4096, 4, 16), (2560, 1, 64), (640, 1, 32), (8192, 2, 32))):
            for dtype in ("fp16", "fp32"):
                shape = f"{kind}-{i}"
                common = dict(device="synthetic", shape=shape, n=1, c=1, h=1, w=1, groups=1, dtype=dtype,
                              layout="nhwc", copy_us="1.0", round_spread="0.0")
                scale = 1.0 if dtype == "fp16" else 1.3
                for k, vpt, threads in _plans(units * (1 if dtype == "fp16" else 2), lanes):
                    true = costmodel.estimate(TRUE.table, kind, clusters, SMS, k, vpt, threads)
                    est = costmodel.estimate(current.table, kind, clusters, SMS, k, vpt, threads)
                    rows.append(dict(common, path="clusters", kernel="k", kind=kind, units=units, lanes=lanes,
                                     clusters=clusters, sms=SMS, cluster=k, vpt=vpt, threads=threads,
                                     estimate=f"{est:.2f}", us=f"{true * scale / 1000:.6f}", ratio_to_copy="1.0"))
                if i % 2 == 0:  # the grid runs half the shapes
                    rows.append(dict(common, path="on-chip-grid", kernel="g", kind="", units="", lanes="",
                                     clusters="", sms="", cluster="", vpt="", threads="", estimate="",
                                     us=f"{TRUE.threshold * scale / 1000:.6f}", ratio_to_copy="1.0"))
    return rows


def write_sweep(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=costmodel.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_fit_finds_the_known_optimum(tmp_path):
    current = costmodel.read_constants(SOURCE)
    cases, device = costmodel.read_sweep(write_sweep(tmp_path / "sweep.csv", synthetic_rows(current)))
    assert device == "synthetic" and len(cases) == 64
    assert costmodel.check_formula(cases, current, "the source") == sum(len(c.plans) for c in cases)
    model = costmodel.Model(cases, current)
    assert model.regrets(TRUE).max() == pytest.approx(0.0, abs=1e-12)  # the known optimum
    report = costmodel.fit(cases, current)
    assert report.current > 0.03  # the current constants pick slower plans on this "GPU"
    assert report.refitted < 1e-9  # the refit picks the fastest plan of every case
    assert report.cross_validated < report.current / 3
    # Its picks are TRUE's (the fastest plan), case by case, and so is where the grid takes over.
    est_true, _ = model.picks(model.estimates(TRUE))
    est_fit, us_fit = model.picks(model.estimates(report.constants))
    assert (us_fit == model.picks(model.estimates(TRUE))[1]).all()
    takes_grid = model.grid < float("inf")
    assert ((est_true >= TRUE.threshold) == (est_fit >= report.constants.threshold))[takes_grid].all()


def test_a_kind_without_plans_keeps_its_constants(tmp_path):
    """Fitted without any narrow-vector case (as when leaving such a shape out), that kind's own
    constants move only by the scale common to all (which keeps the estimate about a nanosecond)."""
    import numpy as np

    current = costmodel.read_constants(SOURCE)
    rows = synthetic_rows(current)
    noise = np.random.default_rng(2).random(len(rows))  # up to 5% on each time: restarts then find better fits
    for row, e in zip(rows, noise):
        row["us"] = f"{float(row['us']) * (1 + 0.05 * e):.6f}"
    cases, _ = costmodel.read_sweep(write_sweep(tmp_path / "sweep.csv", rows))
    model = costmodel.Model(cases, current)
    fitted = model.fit(np.array([c.plans[0]["kind"] != "nhwc-narrow" for c in cases]), restarts=3, seed=0)
    own = [costmodel.FIELDS.index(f) for f in ("vector", "cluster", "log2K")]
    ratios = [fitted.table["nhwc-narrow"][j] / current.table["nhwc-narrow"][j] for j in own]
    assert ratios == pytest.approx([ratios[0]] * 3, rel=1e-12)
    assert fitted.table["nchw"][1] / current.table["nchw"][1] != pytest.approx(ratios[0], rel=1e-3)


def test_fit_command_prints_the_constants_and_the_quality(tmp_path, capsys):
    current = costmodel.read_constants(SOURCE)
    sweep = write_sweep(tmp_path / "sweep.csv", synthetic_rows(current))
    assert costmodel.main(["fit", str(sweep), "--source", str(SOURCE)]) == 0
    out = capsys.readouterr().out
    assert f"{sweep}: synthetic; 64 cases, " in out
    assert "  refitted, on the whole sweep:               0.00%" in out
    current_line = next(line for line in out.splitlines() if line.startswith("  current constants:"))
    assert float(current_line.split()[-1].rstrip("%")) > 3.0
    printed = out[out.index("constexpr CostConstants kCost[] = {"):]
    assert printed.count("},  // k") == 4 and "constexpr double kClustersOverGridCost = " in printed


def test_fit_refuses_estimates_its_formula_does_not_give(tmp_path, capsys):
    """A sweep from a library with other constants (or a formula that drifted): exit 1, no fit."""
    current = costmodel.read_constants(SOURCE)
    rows = synthetic_rows(current)
    rows[3]["estimate"] = f"{float(rows[3]['estimate']) + 1.0:.2f}"
    sweep = write_sweep(tmp_path / "sweep.csv", rows)
    assert costmodel.main(["fit", str(sweep), "--source", str(SOURCE)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{costmodel.PROG} fit: error: the planner's estimates differ from {costmodel.PROG}'s "
                             f"formula with the constants of {SOURCE} on 1 of ")
    assert err[1].startswith("  hint: sweep with a library built from that source")


def test_fit_bad_inputs(tmp_path, capsys):
    missing = tmp_path / "none.csv"
    assert costmodel.main(["fit", str(missing), "--source", str(SOURCE)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"{costmodel.PROG} fit: error: {missing}: no such file"
    other = tmp_path / "bench.csv"
    other.write_text("shape,us\na,1\n")
    assert costmodel.main(["fit", str(other), "--source", str(SOURCE)]) == 2
    assert capsys.readouterr().err.startswith(f"{costmodel.PROG} fit: error: {other}: not a sweep CSV: no column "
                                              "device, n, c, h, w, groups, dtype, layout, path, kernel, kind")
    rows = synthetic_rows(costmodel.read_constants(SOURCE))
    rows[5]["us"] = "fast"
    bad = write_sweep(tmp_path / "bad.csv", rows)
    assert costmodel.main(["fit", str(bad), "--source", str(SOURCE)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{costmodel.PROG} fit: error: {bad}, line 7: not a row of a sweep (path, kind or a number is wrong)")
    assert costmodel.main(["fit", str(bad), "--source", str(tmp_path / "plan.cpp")]) == 2
    assert capsys.readouterr().err.splitlines()[0].startswith(
        f"{costmodel.PROG} fit: error: {tmp_path / 'plan.cpp'}: cannot read the planner's source")


def test_sweep_checks_its_options_then_needs_a_gpu(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    assert costmodel.main(["sweep", "--out", str(out), "--replays", "10"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"{costmodel.PROG} sweep: error: --replays must be >= 30, got 10"
    assert costmodel.main(["sweep", "--out", str(out), "--shapes", "sd15-unet-640x32,nope"]) == 2
    assert "--shapes 'sd15-unet-640x32,nope': expected a comma-separated list of sd15-unet-320x64" in (
        capsys.readouterr().err)
    assert costmodel.main(["sweep", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{costmodel.PROG} sweep: error: --out {tmp_path}: is a directory; give a file name such as "
        f"{tmp_path / 'sweep.csv'}")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the no-GPU exit is checked where there is none")
    kept = tmp_path / "kept.csv"
    kept.write_text("old\n")
    digest = hashlib.sha256(kept.read_bytes()).hexdigest()
    assert costmodel.main(["sweep", "--out", str(kept)]) == 3
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{costmodel.PROG} sweep: error: no CUDA device: the sweep times kernels on a GPU "
        "(torch.cuda.is_available() is False)")
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == digest


def test_sweep_shapes():
    """The sweep's list: the shape list's tensors of up to 21 MB in 16 bits and the extra shapes, each
    once, every kind of kernel among them (C/G of 10, 20, 30, 40 and 60 channels)."""
    names = [s.name for s in costmodel.SWEEP_SHAPES]
    assert len(names) == len(set(names)) == 23
    assert {s.c // s.groups for s in costmodel.SWEEP_SHAPES} >= {10, 20, 30, 40, 60}
    assert all(s.numel * 2 <= costmodel.SWEEP_MAX_BYTES for s in costmodel.SWEEP_SHAPES)


def test_releases_never_force_plans():
    """The option is off unless asked for, and neither the wheel's build nor the Docker image asks."""
    cmake = (ROOT / "plugin_src" / "CMakeLists.txt").read_text()
    assert 'option(TRT_GN_DEBUG_PLANS "let TRTGN_FORCE_PLAN force the kernels\' plan (lab builds only)" OFF)' in cmake
    for release in (ROOT / "pyproject.toml", ROOT / "docker" / "Dockerfile"):
        assert "DEBUG_PLANS" not in release.read_text(), release
