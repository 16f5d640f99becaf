"""The cluster planner's cost model: every cluster plan timed on a GPU, and its constants fitted.

The planner (plugin_src/kernels/group_norm_plan.cpp) picks a cluster plan (blocks a cluster K,
vectors a thread VPT, threads a block) by an estimated time, `clusterShape`, whose constants are
the table `kCost` (one row a kind of kernel), and takes the on-chip grid instead where the estimate
is not under `kClustersOverGridCost` (group_norm_plan.h). On a new GPU:

  sweep  (GPU) times every feasible cluster plan, and the grid where it runs, of each shape and
         dtype in both layouts, against a library built with -DTRT_GN_DEBUG_PLANS=ON (each plan
         forced through TRTGN_FORCE_PLAN); writes a CSV.
  fit    (CPU) reads such a CSV, checks that this module's formula gives the planner's estimate
         of every plan, fits the constants and the threshold to pick the fastest plan of each
         case, and prints them as C++ lines to paste, with the fit's quality: the mean time above
         the fastest plan of each case for the current constants, for the refitted ones, and for
         the refitted ones leaving each shape out of the fit in turn.

    python -m trt_gn.lab.costmodel sweep --out sweep.csv
    python -m trt_gn.lab.costmodel fit sweep.csv

The procedure and how to judge a fit: docs/lab/README.md, "Refitting the cost model on a new GPU".
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import fileio
from ..errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MISSING, Error
from .shapes import SHAPES, Shape

PROG = "python -m trt_gn.lab.costmodel"
FORCE_VARIABLE = "TRTGN_FORCE_PLAN"
PLANNER_SOURCE = Path(__file__).resolve().parents[2] / "plugin_src" / "kernels" / "group_norm_plan.cpp"

# The fields of CostConstants in group_norm_plan.cpp, in order: the terms of the estimate.
FIELDS = ("wave", "vector", "data", "thread", "smThread", "cluster", "log2K")
# The C++ name of each kind's row in kCost, by the name the planner prints (kCostKindNames).
KIND_ROWS = {"nhwc-group": "kNHWCGroup", "nhwc-set": "kNHWCSet", "nchw": "kNCHW", "nhwc-narrow": "kNHWCNarrow"}

# The constants the fit ties together, as the planner's own table does: the fixed terms are one for
# every kind, each kind has its own cost a vector, the narrow-vector kind its own cost a cluster.
WIDE = ("nhwc-group", "nhwc-set", "nchw")
PARAMETERS = (
    *((f, tuple(KIND_ROWS), f) for f in ("wave", "data", "thread", "smThread")),
    *((f"vector[{k}]", (k,), "vector") for k in KIND_ROWS),
    ("cluster", WIDE, "cluster"), ("log2K", WIDE, "log2K"),
    ("cluster[nhwc-narrow]", ("nhwc-narrow",), "cluster"), ("log2K[nhwc-narrow]", ("nhwc-narrow",), "log2K"),
)

# The sweep: the shape list's tensors of up to 21 MB in 16 bits (those cluster plans are for) and
# the shapes the planner's notes measured beside them: one, two and four images, groups of 4 to 80
# channels (whole vectors, sets, 4- and 8-byte vectors), 0.6-8 MB in 16 bits.
SWEEP_MAX_BYTES = 21 << 20
SWEEP_EXTRA = tuple(Shape(f"{n}x{c}x{h}x{w}", n, c, h, w, 32, 1e-5) for n, c, h, w in (
    (2, 320, 32, 32), (2, 640, 16, 16), (1, 640, 32, 32), (4, 640, 32, 32), (2, 640, 48, 48), (2, 960, 32, 32),
    (2, 1280, 32, 32), (2, 1920, 16, 16), (2, 1920, 32, 32), (2, 256, 64, 64), (2, 320, 80, 80), (1, 128, 64, 64),
    (1, 256, 64, 64), (1, 512, 64, 64), (1, 128, 128, 128)))
SWEEP_SHAPES = tuple(s for s in SHAPES if s.numel * 2 <= SWEEP_MAX_BYTES) + SWEEP_EXTRA
SWEEP_DTYPES = ("fp16", "fp32")
LAYOUTS = ("nhwc", "nchw")
CLUSTER_CHOICES = (1, 2, 4, 8)  # the planner says which it takes
VPT_CHOICES = (1, 2, 4, 8, 16, 32)
GRID_PATHS = ("on-chip-grid", "streaming-grid")

COLUMNS = ("device", "shape", "n", "c", "h", "w", "groups", "dtype", "layout", "path", "kernel", "kind", "units",
           "lanes", "clusters", "sms", "cluster", "vpt", "threads", "estimate", "us", "copy_us", "ratio_to_copy",
           "round_spread")
_ESTIMATE = re.compile(r"clusters: estimate ([0-9.]+) of kind=([a-z-]+) units=(\d+) lanes=(\d+) clusters=(\d+) "
                       r"sms=(\d+)")
FORCED_MARK = "forced (TRTGN_FORCE_PLAN)"


class CostModelError(Error, RuntimeError):
    """A bad option or input file (exit 2), no GPU or no debug library (exit 3), a failed check (exit 1)."""


# ---------------------------------------------------------------- the formula ----

def features(kind: str, clusters: int, sms: int, K: int, vpt: int, threads: int) -> tuple[float, ...]:
    """The terms of clusterShape's estimate of one plan, one a field of CostConstants (FIELDS): the
    estimate is their dot product with the kind's row of kCost. The same integer arithmetic as the
    C++: registers and blocks an SM, concurrent clusters (with K >= 4 some SMs stay idle), waves,
    and the blocks the busiest SM runs."""
    regs = min(128, (64 if kind == "nhwc-set" else 32) + 6 * vpt)
    bps = max(1, min(2048 // threads, 65536 // (threads * regs)))
    slots = sms * bps
    concurrent = max(1, slots // K if K <= 2 else slots * 7 // (8 * K))
    waves = -(-clusters // concurrent)
    busy = min(bps, -(-clusters * K // sms))
    return (float(waves), float(waves * vpt), float(waves * busy * threads * vpt), float(waves * threads),
            float(waves * busy * threads), 1.0 if K > 1 else 0.0, math.log2(K))


def estimate(constants: dict[str, tuple[float, ...]], kind: str, clusters: int, sms: int, K: int, vpt: int,
             threads: int) -> float:
    """clusterShape's estimate of one plan with `constants` ({kind: a row of kCost})."""
    return sum(f * c for f, c in zip(features(kind, clusters, sms, K, vpt, threads), constants[kind]))


@dataclass
class Constants:
    """kCost ({kind: (wave, vector, ...)}) and kClustersOverGridCost."""

    table: dict[str, tuple[float, ...]]
    threshold: float


def read_constants(source: Path = PLANNER_SOURCE) -> Constants:
    """kCost from group_norm_plan.cpp and kClustersOverGridCost from group_norm_plan.h beside it,
    checked to have the fields and kinds this module's formula knows."""
    header = source.with_name("group_norm_plan.h")
    texts = []
    for path in (source, header):
        try:
            texts.append(path.read_text())
        except OSError as e:
            raise CostModelError(f"{path}: cannot read the planner's source ({e.strerror or e})",
                                 "give --source the group_norm_plan.cpp of a checkout (group_norm_plan.h beside it)")
    cpp, h = texts
    drift = f"costmodel.py must change with the planner ({source})"
    struct = re.search(r"struct CostConstants \{(.*?)\};", cpp, re.S)
    if struct is None or tuple(re.findall(r"double (\w+);", struct.group(1))) != FIELDS:
        raise CostModelError(f"{source}: CostConstants does not hold the fields {', '.join(FIELDS)}: {drift}",
                             exit_code=EXIT_FAILED)
    names = re.search(r"kCostKindNames\[\] = \{([^}]*)\}", cpp)
    kinds = re.findall(r'"([a-z-]+)"', names.group(1)) if names else []
    table = re.search(r"constexpr CostConstants kCost\[\] = \{\n(.*?)\n\};", cpp, re.S)
    rows = re.findall(r"\{([^{}]*)\},\s*// (\w+)", table.group(1)) if table else []
    if kinds != list(KIND_ROWS) or [r for _, r in rows] != list(KIND_ROWS.values()):
        raise CostModelError(f"{source}: the kinds of kCost are not {', '.join(KIND_ROWS.values())}: {drift}",
                             exit_code=EXIT_FAILED)
    threshold = re.search(r"constexpr double kClustersOverGridCost = ([0-9.eE+-]+);", h)
    if threshold is None:
        raise CostModelError(f"{header}: no kClustersOverGridCost: {drift}", exit_code=EXIT_FAILED)
    try:
        values = {k: tuple(float(v) for v in row.split(",")) for k, (row, _) in zip(KIND_ROWS, rows)}
    except ValueError:
        values = {}
    if any(len(v) != len(FIELDS) for v in values.values()) or len(values) != len(KIND_ROWS):
        raise CostModelError(f"{source}: a row of kCost is not {len(FIELDS)} numbers: {drift}", exit_code=EXIT_FAILED)
    return Constants(values, float(threshold.group(1)))


def _number(v: float) -> str:
    """A C++ double literal of four significant digits."""
    text = repr(float(f"{v:.4g}"))
    return text if ("." in text or "e" in text or "inf" in text) else text + ".0"


def rounded(c: Constants) -> Constants:
    """The constants as cpp_lines prints them."""
    return Constants({k: tuple(float(_number(v)) for v in row) for k, row in c.table.items()},
                     float(_number(c.threshold)))


def cpp_lines(c: Constants) -> str:
    """kCost and kClustersOverGridCost as C++ lines, in the form group_norm_plan.cpp and .h hold them."""
    rows = [f"    {{{', '.join(_number(v) for v in c.table[k])}}},  // {name}" for k, name in KIND_ROWS.items()]
    return ("constexpr CostConstants kCost[] = {\n" + "\n".join(rows) + "\n};\n"
            f"constexpr double kClustersOverGridCost = {_number(c.threshold)};")


# ------------------------------------------------------------------- the sweep ----

def parse_forced_why(why: str) -> dict | None:
    """The estimate and its inputs that a forced cluster plan's why= gives, or None."""
    m = _ESTIMATE.search(why)
    if m is None:
        return None
    return dict(estimate=float(m.group(1)), kind=m.group(2), units=int(m.group(3)), lanes=int(m.group(4)),
                clusters=int(m.group(5)), sms=int(m.group(6)))


class _Forced:
    """TRTGN_FORCE_PLAN set for the calls within, and restored after."""

    def __init__(self, spec: str):
        self.spec = spec

    def __enter__(self):
        self.before = os.environ.get(FORCE_VARIABLE)
        os.environ[FORCE_VARIABLE] = self.spec

    def __exit__(self, *exc):
        if self.before is None:
            os.environ.pop(FORCE_VARIABLE, None)
        else:
            os.environ[FORCE_VARIABLE] = self.before


def _forced_plan(spec: str, params) -> dict | None:
    """The plan trtgn_describe_plan gives with `spec` forced, or None where the planner rejects it."""
    from .. import abi

    with _Forced(spec):
        try:
            plan = abi.describe_plan(params)
        except abi.TrtGnError as e:
            if e.status == abi.Status.INVALID_ARGUMENT and e.message.startswith(f'{FORCE_VARIABLE}="'):
                return None
            raise
    if not plan.get("why", "").startswith(FORCED_MARK):
        raise CostModelError(
            f"the kernels library {abi.library_path()} was built without TRT_GN_DEBUG_PLANS: it ignores "
            f"{FORCE_VARIABLE}", "build one with cmake -DTRT_GN_DEBUG_PLANS=ON (scripts/gpu_check.sh sweep does) "
            "and point TRT_GN_KERNELS_LIBRARY at it", exit_code=EXIT_MISSING)
    return plan


def _require_debug_library() -> None:
    """Exit 3 unless a GPU is there and the loaded kernels library forces plans."""
    import torch

    from .. import abi
    from ..ops import abi_params

    if not torch.cuda.is_available():
        raise CostModelError("no CUDA device: the sweep times kernels on a GPU (torch.cuda.is_available() is "
                             "False)", exit_code=EXIT_MISSING)
    abi.load()  # a missing or unloadable library: abi.LibraryError, exit 3
    x = torch.zeros(1, 32, 8, 8, device="cuda", dtype=torch.float16)
    _forced_plan("path=two-pass", abi_params(x, torch.empty_like(x), None, None, 32, 1e-5, "silu"))


def sweep(shapes, dtypes, layouts, replays: int, rounds: int, log) -> list[dict]:
    """Every feasible cluster plan and the grid of each (shape, dtype, layout), timed with the
    benchmark's timer (trt_gn.lab.bench: LAUNCHES launches in a CUDA graph, the median replay, the
    fastest of `rounds` rounds) beside a device copy of the same tensor; each plan's output checked
    against the float64 reference. `log(line)` reports progress."""
    import torch

    from .. import abi
    from ..ops import DTYPE_BY_NAME, abi_params
    from ..reference import assert_close, group_norm_act_reference
    from .bench import fastest_of_rounds, kernel_launcher

    device = torch.cuda.get_device_name()
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [(s, d, la) for s in shapes for d in dtypes for la in layouts]
    rows: list[dict] = []
    started = time.perf_counter()
    for i, (shape, dtype_name, layout) in enumerate(cases, 1):
        case_started = time.perf_counter()
        dtype = DTYPE_BY_NAME[dtype_name]
        x = torch.randn(shape.size, device="cuda", dtype=dtype, generator=gen)
        weight = (1 + 0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
        bias = (0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.empty_like(x)
        params = abi_params(x, y, weight, bias, shape.groups, shape.eps, "silu", layout=layout)
        specs = [f"path=clusters cluster={k} vpt={v}" for k in CLUSTER_CHOICES for v in VPT_CHOICES]
        specs += [f"path={p}" for p in GRID_PATHS]
        plans = {spec: plan for spec in specs if (plan := _forced_plan(spec, params)) is not None}
        ref = group_norm_act_reference(x, weight, bias, shape.groups, shape.eps, "silu")
        copy_out = torch.empty_like(x)
        variants = {"copy": lambda out=copy_out, src=x: out.copy_(src)}
        for spec in list(plans):
            with _Forced(spec):
                launch = kernel_launcher(x, y, weight, bias, shape, layout)
                y.fill_(float("nan"))
                try:
                    launch()
                    torch.cuda.synchronize()
                except abi.TrtGnError as e:  # planned, but this GPU does not launch it (say, a cluster's size)
                    if e.status != abi.Status.CUDA_ERROR:
                        raise
                    log(f"sweep: {shape.name} {dtype_name} {layout} {spec}: left out, its launch failed: {e}")
                    del plans[spec]
                    continue
                try:
                    assert_close(y, ref, what=f"{shape.name} {dtype_name} {layout} {spec}")
                except AssertionError as e:
                    raise CostModelError(f"a forced plan's output is wrong: {e}", exit_code=EXIT_FAILED) from None

            def forced(spec=spec, launch=launch):
                os.environ[FORCE_VARIABLE] = spec  # read when the launch is captured
                launch()

            variants[spec] = forced
        with _Forced(""):  # each plan's launches set it in turn; as before afterwards
            timed = fastest_of_rounds(variants, rounds, replays)
        copy_us = timed["copy"][0]
        for spec, plan in plans.items():
            us, spread = timed[spec]
            cost = parse_forced_why(plan["why"]) or {}
            rows.append(dict(device=device, shape=shape.name, n=shape.n, c=shape.c, h=shape.h, w=shape.w,
                             groups=shape.groups, dtype=dtype_name, layout=layout, path=plan["path"],
                             kernel=plan["kernel"], kind=cost.get("kind", ""), units=cost.get("units", ""),
                             lanes=cost.get("lanes", ""), clusters=cost.get("clusters", ""), sms=cost.get("sms", ""),
                             cluster=plan["cluster"] if cost else "", vpt=plan["vpt"] if cost else "",
                             threads=plan["threads"] if cost else "", estimate=cost.get("estimate", ""),
                             us=f"{us:.4f}", copy_us=f"{copy_us:.4f}", ratio_to_copy=f"{us / copy_us:.4f}",
                             round_spread=f"{spread:.4f}"))
        n_clusters = sum(1 for p in plans.values() if p["path"] == "clusters")
        grid = [p["path"] for p in plans.values() if p["path"] != "clusters"]
        best = min(plans, key=lambda s: timed[s][0]) if plans else None
        log(f"sweep {i}/{len(cases)}: {shape.name} {dtype_name} {layout}: {n_clusters} cluster plans"
            f"{', the ' + grid[0] if grid else ''}; fastest "
            f"{best.removeprefix('path=') + f' {timed[best][0]:.2f} us' if best else '-'}, copy {copy_us:.2f} us "
            f"({time.perf_counter() - case_started:.0f} s; {time.perf_counter() - started:.0f} s in all)")
        del x, y, copy_out, ref, variants
        torch.cuda.empty_cache()
    return rows


def write_rows(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    fileio.write_text(path, buf.getvalue())


# --------------------------------------------------------------------- the fit ----

@dataclass
class Case:
    """One (shape, dtype, layout): its cluster plans in the planner's loop order and the grid's time."""

    shape: str
    dtype: str
    layout: str
    plans: list[dict]  # kind, clusters, sms, cluster, vpt, threads, estimate, us
    grid_us: float | None


def read_sweep(path: Path) -> tuple[list[Case], str]:
    """The cases of a sweep CSV and its device name."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CostModelError(f"{path}: no such file", "give the CSV that the sweep wrote") from None
    except OSError as e:
        raise CostModelError(f"{path}: cannot read it ({e.strerror or e})") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise CostModelError(f"{path}: not a sweep CSV: no column {', '.join(missing)}",
                             f"give the CSV that `{PROG} sweep` wrote")
    cases: dict[tuple, Case] = {}
    devices = set()
    for line, row in enumerate(reader, 2):
        try:
            key = (row["shape"], row["dtype"], row["layout"])
            case = cases.setdefault(key, Case(*key, [], None))
            us = float(row["us"])
            if not us > 0:
                raise ValueError
            if row["path"] == "clusters":
                if row["kind"] not in KIND_ROWS:
                    raise ValueError
                case.plans.append(dict(kind=row["kind"], clusters=int(row["clusters"]), sms=int(row["sms"]),
                                       cluster=int(row["cluster"]), vpt=int(row["vpt"]),
                                       threads=int(row["threads"]), estimate=float(row["estimate"]), us=us))
            elif row["path"] in GRID_PATHS:
                case.grid_us = us if case.grid_us is None else min(case.grid_us, us)
            else:
                raise ValueError
        except (ValueError, TypeError):
            raise CostModelError(f"{path}, line {line}: not a row of a sweep (path, kind or a number is "
                                 "wrong)") from None
        devices.add(row["device"])
    kept = [c for c in cases.values() if c.plans]
    if not kept:
        raise CostModelError(f"{path}: no cluster plans to fit")
    for c in kept:  # clusterShape's order: K, then VPT (the first of equal estimates wins)
        c.plans.sort(key=lambda p: (p["cluster"], p["vpt"]))
    return kept, ", ".join(sorted(devices))


def check_formula(cases: list[Case], constants: Constants, what: str) -> int:
    """Raise unless features() with `constants` gives every plan's estimate that the planner wrote
    (to its two decimals); returns the plans checked."""
    wrong = []
    for c in cases:
        for p in c.plans:
            mine = estimate(constants.table, p["kind"], p["clusters"], p["sms"], p["cluster"], p["vpt"], p["threads"])
            if abs(mine - p["estimate"]) > 0.006 + 1e-9 * abs(mine):
                wrong.append((c, p, mine))
    if wrong:
        c, p, mine = wrong[0]
        raise CostModelError(
            f"the planner's estimates differ from {PROG}'s formula with the constants of {what} on {len(wrong)} "
            f"of {sum(len(c.plans) for c in cases)} plans (first: {c.shape} {c.dtype} {c.layout} "
            f"cluster={p['cluster']} vpt={p['vpt']}: planner {p['estimate']:.2f}, formula {mine:.2f})",
            "sweep with a library built from that source, or give --source the group_norm_plan.cpp the swept "
            "library was built from (git show REV:plugin_src/kernels/group_norm_plan.cpp, and its .h beside it)",
            exit_code=EXIT_FAILED)
    return sum(len(c.plans) for c in cases)


class Model:
    """The sweep as arrays. A plan's estimate is the dot product of its features with its kind's
    row of constants; in the search, base + G @ theta for the free parameters theta (PARAMETERS
    that some plan of the sweep prices), the others staying at their value in `start`."""

    def __init__(self, cases: list[Case], start: Constants):
        import numpy as np

        self.cases = cases
        self.start = start
        plans = [p for c in cases for p in c.plans]
        self.F = np.array([features(p["kind"], p["clusters"], p["sms"], p["cluster"], p["vpt"], p["threads"])
                           for p in plans])
        kinds = list(KIND_ROWS)
        self.kind = np.array([kinds.index(p["kind"]) for p in plans])
        self.free, columns = [], []
        for name, owners, field in PARAMETERS:
            owned = np.isin(self.kind, [kinds.index(k) for k in owners])
            column = np.where(owned, self.F[:, FIELDS.index(field)], 0.0)
            if column.any():
                self.free.append((name, owners, field))
                columns.append(column)
        self.G = np.stack(columns, axis=1)
        self.base = self.estimates(start) - self.G @ self.theta_of(start)
        self.us = np.array([p["us"] for p in plans])
        self.case_of = np.repeat(np.arange(len(cases)), [len(c.plans) for c in cases])
        self.starts = np.cumsum([0] + [len(c.plans) for c in cases])[:-1]
        self.grid = np.array([c.grid_us if c.grid_us is not None else np.inf for c in cases])
        self.best = np.minimum(np.minimum.reduceat(self.us, self.starts), self.grid)

    def estimates(self, c: Constants):
        """Every plan's estimate with `c`."""
        import numpy as np

        rows = np.array([c.table[k] for k in KIND_ROWS])
        return (self.F * rows[self.kind]).sum(axis=1)

    def theta_of(self, c: Constants):
        import numpy as np

        return np.array([c.table[owners[0]][FIELDS.index(field)] for _, owners, field in self.free])

    def constants_of(self, theta, threshold: float) -> Constants:
        table = {k: list(row) for k, row in self.start.table.items()}
        for value, (_, owners, field) in zip(theta, self.free):
            for k in owners:
                table[k][FIELDS.index(field)] = float(value)
        return Constants({k: tuple(v) for k, v in table.items()}, float(threshold))

    def picks(self, est):
        """(estimate, time) of each case's picked plan: the first of its least estimates."""
        import numpy as np

        low = np.minimum.reduceat(est, self.starts)
        index = np.where(est <= low[self.case_of], np.arange(len(est)), len(est))
        first = np.minimum.reduceat(index, self.starts)
        return est[first], self.us[first]

    def regrets(self, c: Constants):
        """Each case's time over its fastest plan's, minus 1, for the plan the planner takes with `c`:
        the picked cluster plan where its estimate is under the threshold or there is no grid."""
        import numpy as np

        est, us = self.picks(self.estimates(c))
        chosen = np.where((est < c.threshold) | ~np.isfinite(self.grid), us, self.grid)
        return chosen / self.best - 1.0

    def best_threshold(self, est, mask, near: float) -> tuple[float, float]:
        """(threshold, mean regret over the cases of `mask`) with the threshold that serves those
        cases best; among equally good ones, the one nearest `near`."""
        import numpy as np

        pick_est, us = self.picks(est)
        r_cluster = us / self.best - 1.0
        r_grid = self.grid / self.best - 1.0
        has_grid = mask & np.isfinite(self.grid)
        fixed = float(r_cluster[mask & ~has_grid].sum())
        n = int(mask.sum())
        if not has_grid.any():
            return near, fixed / n
        order = np.argsort(pick_est[has_grid], kind="stable")
        e = pick_est[has_grid][order]
        rc, rg = r_cluster[has_grid][order], r_grid[has_grid][order]
        # The m cases of lowest estimates on clusters, the rest on the grid (m = 0 .. len(e)), at a
        # threshold between the m-th and the next estimate: possible only where they differ.
        totals = rg.sum() + np.concatenate(([0.0], np.cumsum(rc - rg)))
        cuts = np.concatenate(([e[0] / 2], (e[:-1] + e[1:]) / 2, [e[-1] * 1.5]))
        possible = np.concatenate(([True], e[:-1] < e[1:], [True]))
        good = np.flatnonzero(possible & (totals <= totals[possible].min() + 1e-12))
        m = good[np.argmin(np.abs(np.log(cuts[good] / near)))]
        return float(cuts[m]), (fixed + float(totals[m])) / n

    def fit(self, mask, restarts: int, seed: int) -> Constants:
        """The constants and threshold of least mean regret over the cases of `mask`: coordinate
        steps in log space from the start constants and from `restarts` random points around the best
        so far; then scaled so that an estimate is about a nanosecond (the picks do not change)."""
        import numpy as np

        rng = np.random.default_rng(seed)
        theta0 = self.theta_of(self.start)
        lo, hi = theta0 / 1000.0, theta0 * 1000.0
        # Only what some plan of these cases prices moves (a kind left out with its shape keeps its own).
        active = np.flatnonzero(self.G[mask[self.case_of]].any(axis=0))

        def score(theta):
            return self.best_threshold(self.base + self.G @ theta, mask, self.start.threshold)[1]

        def descend(theta):
            value = score(theta)
            for step in (1.0, 0.5, 0.25, 0.1, 0.05, 0.02):
                for _ in range(40):
                    moved = False
                    for j in active:
                        for sign in (1.0, -1.0):
                            trial = theta.copy()
                            trial[j] = min(max(trial[j] * math.exp(sign * step), lo[j]), hi[j])
                            v = score(trial)
                            if v < value - 1e-12:
                                theta, value, moved = trial, v, True
                    if not moved:
                        break
            return theta, value

        best, value = descend(theta0)
        for _ in range(restarts):
            start = best.copy()
            start[active] = np.clip(best[active] * np.exp(rng.normal(0.0, 0.7, len(active))), lo[active], hi[active])
            theta, v = descend(start)
            if v < value - 1e-12:
                best, value = theta, v
        est = self.base + self.G @ best
        threshold, _ = self.best_threshold(est, mask, self.start.threshold)
        fitted = self.constants_of(best, threshold)
        plans = mask[self.case_of]
        scale = float((est * self.us * 1000.0)[plans].sum() / (est * est)[plans].sum())
        return Constants({k: tuple(v * scale for v in row) for k, row in fitted.table.items()},
                         fitted.threshold * scale)


@dataclass
class FitReport:
    cases: int
    shapes: int
    plans: int
    current: float        # mean regret of the current constants
    refitted: float       # of the refitted (rounded) constants, on the whole sweep
    cross_validated: float  # of constants fitted without each case's shape, on that shape's cases
    constants: Constants  # refitted, rounded as printed
    worst: list[tuple[str, float]]  # the refitted constants' worst cases


def fit(cases: list[Case], current: Constants, restarts: int = 20, cv_restarts: int = 5, seed: int = 0,
        log=None) -> FitReport:
    """Refit `current` to the sweep's cases; the quality as FitReport."""
    import numpy as np

    model = Model(cases, current)
    refitted = rounded(model.fit(np.ones(len(cases), dtype=bool), restarts, seed))
    shapes = list(dict.fromkeys(c.shape for c in cases))
    held_out = np.zeros(len(cases))
    for i, shape in enumerate(shapes, 1):
        out = np.array([c.shape == shape for c in cases])
        held_out[out] = model.regrets(rounded(model.fit(~out, cv_restarts, seed + i)))[out]
        if log is not None:
            log(f"cross-validation {i}/{len(shapes)}: {shape} left out: {100 * held_out[out].mean():.2f}% above "
                "the fastest")
    r = model.regrets(refitted)
    worst = sorted(((f"{c.shape} {c.dtype} {c.layout}", float(v)) for c, v in zip(cases, r)), key=lambda t: -t[1])
    return FitReport(len(cases), len(shapes), sum(len(c.plans) for c in cases), float(model.regrets(current).mean()),
                     float(r.mean()), float(held_out.mean()), refitted, [w for w in worst[:3] if w[1] > 0])


# ------------------------------------------------------------------------ main ----

def _names(text: str, allowed, what: str) -> list[str]:
    names = [t for t in text.split(",") if t]
    bad = [t for t in names if t not in allowed]
    if bad or not names:
        raise CostModelError(f"--{what} {text!r}: expected a comma-separated list of {', '.join(allowed)}")
    return names


def run_sweep(args) -> int:
    from .bench import MIN_REPLAYS

    by_name = {s.name: s for s in SWEEP_SHAPES}
    shapes = [by_name[n] for n in _names(args.shapes, by_name, "shapes")] if args.shapes else list(SWEEP_SHAPES)
    dtypes = _names(args.dtypes, ("fp16", "bf16", "fp32"), "dtypes")
    layouts = _names(args.layouts, LAYOUTS, "layouts")
    if args.replays < MIN_REPLAYS:
        raise CostModelError(f"--replays must be >= {MIN_REPLAYS}, got {args.replays}")
    if args.rounds < 1:
        raise CostModelError(f"--rounds must be >= 1, got {args.rounds}")
    problem = fileio.output_file_problem(args.out, example="sweep.csv")
    if problem:
        raise CostModelError(f"--out {args.out}: {problem}")
    _require_debug_library()

    def log(line):
        print(line, file=sys.stderr, flush=True)

    log(f"sweep: {len(shapes)} shapes x {len(dtypes)} dtypes x {len(layouts)} layouts, every cluster plan and the "
        f"grid, {args.rounds} rounds of {args.replays} replays")
    rows = sweep(shapes, dtypes, layouts, args.replays, args.rounds, log)
    write_rows(rows, Path(args.out))
    print(f"wrote {args.out}: {len(rows)} timed plans")
    return 0


def run_fit(args) -> int:
    current = read_constants(Path(args.source))
    cases, device = read_sweep(Path(args.csv))
    checked = check_formula(cases, current, args.source)
    if args.restarts < 0 or args.cv_restarts < 0:
        raise CostModelError("--restarts and --cv-restarts must be >= 0")
    print(f"{args.csv}: {device}; {len(cases)} cases, {checked} cluster plans, "
          f"{sum(c.grid_us is not None for c in cases)} grid times")
    print(f"the planner's estimate of every plan is {PROG}'s formula with the constants of {args.source}")

    def log(line):
        print(line, file=sys.stderr, flush=True)

    report = fit(cases, current, args.restarts, args.cv_restarts, args.seed, log if args.verbose else None)
    print(f"mean time above the fastest plan of each case ({report.cases} cases, {report.shapes} shapes):")
    print(f"  current constants:                          {100 * report.current:.2f}%")
    print(f"  refitted, on the whole sweep:               {100 * report.refitted:.2f}%")
    print(f"  refitted, each shape left out of the fit:   {100 * report.cross_validated:.2f}%")
    if report.worst:
        print("  refitted, worst: " + ", ".join(f"{name} {100 * v:.1f}%" for name, v in report.worst))
    print("the refitted constants, to paste over kCost in plugin_src/kernels/group_norm_plan.cpp and over "
          "kClustersOverGridCost in plugin_src/kernels/group_norm_plan.h:")
    print(cpp_lines(report.constants))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{sweep,fit}")
    s = sub.add_parser("sweep", help="time every cluster plan on this GPU (a library built with "
                                     "-DTRT_GN_DEBUG_PLANS=ON)",
                       description="Time every feasible cluster plan and the grid of each shape, dtype and layout "
                                   "on this GPU; write a CSV. Needs a kernels library built with "
                                   "-DTRT_GN_DEBUG_PLANS=ON (TRT_GN_KERNELS_LIBRARY names it): exit 3 without one "
                                   "or without a GPU.")
    s.add_argument("--out", required=True, metavar="CSV", help="the CSV to write (written once, at the end)")
    s.add_argument("--shapes", default="", metavar="LIST",
                   help="comma-separated names (default: all): " + ", ".join(x.name for x in SWEEP_SHAPES))
    s.add_argument("--dtypes", default=",".join(SWEEP_DTYPES), metavar="LIST",
                   help="comma-separated: fp16, bf16, fp32 (default: %(default)s)")
    s.add_argument("--layouts", default=",".join(LAYOUTS), metavar="LIST",
                   help="comma-separated: nhwc, nchw (default: %(default)s)")
    s.add_argument("--replays", type=int, default=30, help="graph replays a timing, >= 30 (default: %(default)s)")
    s.add_argument("--rounds", type=int, default=2,
                   help="rounds; every plan timed once a round, the fastest kept (default: %(default)s)")
    f = sub.add_parser("fit", help="fit the constants to a sweep's CSV (no GPU)",
                       description="Check the formula against the planner's estimates in a sweep's CSV, fit kCost "
                                   "and kClustersOverGridCost to pick the fastest plan of each case, and print "
                                   "them as C++ lines with the fit's quality (mean time above the fastest plan: "
                                   "current constants, refitted, refitted leaving each shape out).")
    f.add_argument("csv", help="a CSV that the sweep wrote")
    f.add_argument("--source", default=str(PLANNER_SOURCE), metavar="CPP",
                   help="the group_norm_plan.cpp the swept library was built from, group_norm_plan.h beside it "
                        "(default: this checkout's)")
    f.add_argument("--restarts", type=int, default=20,
                   help="random restarts of the search on the whole sweep (default: %(default)s)")
    f.add_argument("--cv-restarts", type=int, default=5,
                   help="random restarts of each leave-one-shape-out fit (default: %(default)s)")
    f.add_argument("--seed", type=int, default=0, help="seed of the restarts (default: %(default)s)")
    f.add_argument("--verbose", action="store_true", help="a line on stderr as each shape is left out")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_sweep(args) if args.command == "sweep" else run_fit(args)
    except Error as e:
        print(f"{PROG} {args.command}: error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"  hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
