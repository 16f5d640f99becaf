"""A/B timing of kernels libraries, alternated on one GPU: how the kernel notes' "old and new
alternated N times" are measured.

    python3 -m trt_gn.lab.ab --variant old=HEAD~1 --variant new=. \\
        --shapes sd15-unet-320x64,1/512/64/64/32 --dtypes fp16,bf16 --layouts nhwc,nchw --rounds 3

Each variant is a git revision of this repository (its plugin_src/ is archived and built), a
directory holding plugin_src/ (built; "." is the working tree, patched copies work too, and where
no .git folder is, a revision's source staged by scripts/stage_old_source.sh), or a built
libtrt_gn_kernels.so. The kernels library is built for --arch with CMake, all variants at
once. Then, round after round, each variant runs in a process of its own (the library is loaded
once a process, from TRT_GN_KERNELS_LIBRARY), the first variant of a round moving one place each
round so that no variant always runs first. A process times every case the benchmark's way (20
launches in a CUDA graph, median of the replays, random data, the same data for every variant)
together with a device copy of the same tensor, and checks the output against the float64
reference. The table gives each variant's fastest round and the range of its rounds (the same
code moves by 0.1-0.3 us between rounds on the small shapes); ab.csv under --out has every
round. Variants must load with this package's trt_gn (the same ABI version).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import Error

# The checkout this package lives in (its git revisions and plugin_src/ are what variants build
# from); installed elsewhere, the checkout the tool is run from.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
REPO = PACKAGE_ROOT if (PACKAGE_ROOT / "plugin_src").is_dir() else Path.cwd()
LIBRARY = "libtrt_gn_kernels.so"
NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
DTYPES = ("fp16", "bf16", "fp32")
LAYOUTS = ("nhwc", "nchw")
MIN_REPLAYS = 30
CSV_FIELDS = ("variant", "round", "case", "us_per_launch", "copy_us", "check")


class AbError(Error, RuntimeError):
    """A bad option, or a variant that cannot be built or run (exit 2)."""


def parse_variant(spec: str) -> tuple[str, str]:
    """NAME=SOURCE -> (name, source)."""
    name, sep, source = spec.partition("=")
    if not sep or not source:
        raise AbError(f"--variant {spec!r}: expected NAME=SOURCE (a git revision, a directory or a .so)")
    if not NAME_RE.fullmatch(name):
        raise AbError(f"--variant {spec!r}: the name may hold only letters, digits, '_' and '-'")
    return name, source


def shape_names() -> list[str]:
    from .shapes import SHAPES

    return [s.name for s in SHAPES]


def parse_shape(spec: str):
    """A name from the shape list, or N/C/H/W/G with an optional /EPS (default 1e-5)."""
    from .shapes import SHAPES_BY_NAME, Shape

    if spec in SHAPES_BY_NAME:
        return SHAPES_BY_NAME[spec]
    parts = spec.split("/")
    try:
        if len(parts) not in (5, 6):
            raise ValueError
        n, c, h, w, g = (int(p) for p in parts[:5])
        eps = float(parts[5]) if len(parts) == 6 else 1e-5
    except ValueError:
        raise AbError(f"shape {spec!r}: expected a name from the shape list or N/C/H/W/G[/EPS]") from None
    if min(n, c, h, w, g) < 1 or c % g:
        raise AbError(f"shape {spec!r}: N, C, H, W and G must be >= 1 and C divisible by G")
    return Shape(spec, n, c, h, w, g, eps)


def split_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [t for t in text.split(",") if t]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise AbError(f"--{what} {text!r}: expected a comma-separated list of {', '.join(allowed)}")
    return items


def source_kind(name: str, source: str) -> str:
    """'lib' (a built library), 'dir' (a directory holding plugin_src/) or 'rev' (a git revision
    of this repository); checked before anything is written."""
    path = Path(source)
    if source.endswith(".so"):
        if not path.is_file():
            raise AbError(f"variant {name}: no library file {source}")
        return "lib"
    if path.is_dir():
        if not (path / "plugin_src" / "CMakeLists.txt").is_file():
            raise AbError(f"variant {name}: {source} is a directory without plugin_src/CMakeLists.txt")
        return "dir"
    if git_commit(source) is None:
        if not (REPO / ".git").exists():
            raise AbError(f"variant {name}: {source!r} is neither a directory nor a .so file, and {REPO} is no git "
                          "checkout to find a revision in (scripts/stage_old_source.sh REV stages a revision's "
                          "source as a directory)")
        raise AbError(f"variant {name}: {source!r} is neither a git revision of {REPO}, a directory nor a .so file")
    return "rev"


def git_commit(rev: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def archive(name: str, rev: str, out: Path) -> Path:
    """Extracts plugin_src/ of revision `rev` into out/src/NAME, unless that commit is there
    already; returns that directory. Another commit's build is removed with it: its files carry
    the commit's time, which may be older than the objects built before, and the build would then
    keep them."""
    commit = git_commit(rev)
    dest = out / "src" / name
    stamp = dest / ".commit"
    if stamp.is_file() and stamp.read_text() == commit:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(out / "build" / name, ignore_errors=True)
    dest.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(REPO), "archive", commit, "plugin_src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(dest, filter="data")
    stamp.write_text(commit)
    return dest


def build(name: str, src: Path, out: Path, arch: str) -> Path:
    """Builds the kernels library of src/plugin_src into out/build/NAME; returns the library.
    A source folder that names the commit it was archived from (src/.commit: archive() and
    scripts/stage_old_source.sh write it) is built afresh when that commit is not the one built
    there last: its files carry the commit's time, which may be older than the objects there."""
    bdir = out / "build" / name
    log = out / "build" / f"{name}.log"
    cache = bdir / "CMakeCache.txt"
    if cache.is_file() and f"CMAKE_HOME_DIRECTORY:INTERNAL={src / 'plugin_src'}\n" not in cache.read_text():
        shutil.rmtree(bdir)  # configured for another source directory under the same name
    commit = (src / ".commit").read_text().strip() if (src / ".commit").is_file() else None
    built = bdir / ".commit"
    if commit and bdir.is_dir() and (not built.is_file() or built.read_text() != commit):
        shutil.rmtree(bdir)
    bdir.mkdir(parents=True, exist_ok=True)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = (
        ["cmake", "-S", str(src / "plugin_src"), "-B", str(bdir), *generator, f"-DCMAKE_CUDA_ARCHITECTURES={arch}",
         "-DTRT_GN_BUILD_PLUGIN=OFF", "-DTRT_GN_BUILD_TESTS=OFF"],
        ["cmake", "--build", str(bdir), "--target", "trt_gn_kernels_shared"],
    )
    with open(log, "w") as f:
        for cmd in steps:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                tail = log.read_text().splitlines()[-15:]
                raise AbError(f"variant {name}: the build failed (log: {log}):\n" + "\n".join(tail))
    if commit:
        built.write_text(commit)
    return bdir / LIBRARY


def prepare(variants: list[tuple[str, str, str]], out: Path, arch: str, say=print) -> dict[str, Path]:
    """{name: library} for (name, source, kind) triples, building what needs building, in parallel."""
    libs = {name: Path(source).resolve() for name, source, kind in variants if kind == "lib"}
    to_build = {name: archive(name, source, out) if kind == "rev" else Path(source).resolve()
                for name, source, kind in variants if kind != "lib"}
    if to_build:
        say(f"building {', '.join(to_build)} for CUDA architectures {arch} (logs in {out / 'build'}) ...")
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(to_build)) as pool:
            futures = {name: pool.submit(build, name, src, out, arch) for name, src in to_build.items()}
            libs.update({name: f.result() for name, f in futures.items()})
        say(f"built in {time.monotonic() - t0:.0f} s")
    return {name: libs[name] for name, _, _ in variants}


def round_order(names: list[str], r: int) -> list[str]:
    """Round r's order: the list rotated by r."""
    k = r % len(names)
    return names[k:] + names[:k]


def summarise(rows: list[dict], names: list[str]) -> str:
    """The table: per case, each variant's fastest round (and the range of its rounds), its
    difference from the first variant's fastest, the copy's fastest round and the checks."""
    cases: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        cases.setdefault(row["case"], {}).setdefault(row["variant"], []).append(row)
    head = ["case"] + [f"{n} us" for n in names] + [f"{n} - {names[0]}" for n in names[1:]] + ["copy us", "checks"]
    lines = [head]
    for case, by_variant in cases.items():
        best = {n: min(r["us_per_launch"] for r in by_variant[n]) for n in names}
        cells = [case]
        for n in names:
            ts = [r["us_per_launch"] for r in by_variant[n]]
            cells.append(f"{min(ts):.2f} ({min(ts):.2f}-{max(ts):.2f})")
        cells += [f"{best[n] - best[names[0]]:+.2f}" for n in names[1:]]
        cells.append(f"{min(r['copy_us'] for rs in by_variant.values() for r in rs):.2f}")
        failed = sorted({f"{n}: {r['check']}" for n in names for r in by_variant[n] if r["check"] != "ok"})
        cells.append("; ".join(failed) if failed else "ok")
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def write_csv(rows: list[dict], path: Path) -> None:
    """All rows at once, through a temporary file: no half-written CSV."""
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def require_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise AbError("no CUDA device: timing needs a GPU (torch.cuda.is_available() is False); "
                      "--build-only builds without one")


def time_cases(cases: list[tuple[str, str, str]], replays: int) -> None:
    """The worker: times each (shape, dtype, layout) with the library of TRT_GN_KERNELS_LIBRARY;
    prints one JSON object a case."""
    import torch

    from .. import abi
    from . import bench
    from ..reference import assert_close, group_norm_act_reference

    require_gpu()
    abi.load()
    from ..ops import DTYPE_BY_NAME as dtypes

    for shape_spec, dtype_name, layout in cases:
        shape, dtype = parse_shape(shape_spec), dtypes[dtype_name]
        gen = torch.Generator(device="cuda").manual_seed(1)  # the same data in every process
        x = torch.randn(shape.size, device="cuda", dtype=dtype, generator=gen) * 2 + 0.5
        weight = (1 + 0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
        bias = (0.1 * torch.randn(shape.c, device="cuda", generator=gen)).to(dtype)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.full_like(x, float("nan"))  # an element left unwritten fails the check
        y_copy = torch.empty_like(x)
        us = bench.time_per_launch_us(bench.kernel_launcher(x, y, weight, bias, shape, layout), replays)
        copy_us = bench.time_per_launch_us(lambda: y_copy.copy_(x), replays)
        try:
            assert_close(y, group_norm_act_reference(x, weight, bias, shape.groups, shape.eps, "silu"), dtype)
            check = "ok"
        except AssertionError as e:
            check = "FAIL " + str(e).splitlines()[0]
        print(json.dumps({"case": f"{shape_spec} {dtype_name} {layout}", "us_per_launch": us,
                          "copy_us": copy_us, "check": check}), flush=True)
        del x, y, y_copy
        torch.cuda.empty_cache()


def run_variant(name: str, library: Path, cases: list, replays: int) -> list[dict]:
    env = dict(os.environ, TRT_GN_KERNELS_LIBRARY=str(library))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-m", __spec__.name if __spec__ else "trt_gn.lab.ab", "--worker", json.dumps(cases),
                           "--replays", str(replays)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AbError(f"variant {name} ({library}) failed:\n" + "\n".join(proc.stderr.strip().splitlines()[-10:]))
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trt_gn.lab.ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SOURCE",
                        help="a library to time: NAME=REV (a git revision), NAME=DIR (a directory holding "
                             "plugin_src/; '.' is the working tree) or NAME=FILE.so (built); give it once a variant")
    parser.add_argument("--shapes", default=None,
                        help="comma-separated names from the shape list (trt_gn/lab/shapes.py) or N/C/H/W/G[/EPS] "
                             "(default: the whole shape list)")
    parser.add_argument("--dtypes", default="fp16", help="comma-separated: fp16, bf16, fp32 (default: %(default)s)")
    parser.add_argument("--layouts", default="nhwc,nchw", help="comma-separated: nhwc, nchw (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; every variant once a round (default: %(default)s)")
    parser.add_argument("--replays", type=int, default=MIN_REPLAYS,
                        help=f"graph replays a timing, >= {MIN_REPLAYS} (default: %(default)s)")
    parser.add_argument("--arch", default="90", help="CMAKE_CUDA_ARCHITECTURES of the builds (default: %(default)s)")
    parser.add_argument("--out", default="ab-out", help="builds, sources and ab.csv go here (default: %(default)s)")
    parser.add_argument("--build-only", action="store_true", help="build the variants and stop (no GPU needed)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.replays < MIN_REPLAYS:
            raise AbError(f"--replays must be >= {MIN_REPLAYS}, got {args.replays}")
        if args.worker is not None:
            time_cases([tuple(c) for c in json.loads(args.worker)], args.replays)
            return 0
        if args.rounds < 1:
            raise AbError(f"--rounds must be >= 1, got {args.rounds}")
        if not args.variant:
            raise AbError("no --variant given: name at least one, e.g. --variant old=HEAD~1 --variant new=.")
        named = [parse_variant(v) for v in args.variant]
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise AbError(f"--variant names must differ: {', '.join(names)}")
        variants = [(n, source, source_kind(n, source)) for n, source in named]
        shapes = [s for s in (args.shapes or ",".join(shape_names())).split(",") if s]
        if not shapes:
            raise AbError("--shapes is empty")
        for s in shapes:
            parse_shape(s)
        cases = [(s, d, lay) for s in shapes for d in split_list(args.dtypes, DTYPES, "dtypes")
                 for lay in split_list(args.layouts, LAYOUTS, "layouts")]
        if not args.build_only:
            require_gpu()
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        libs = prepare(variants, out, args.arch)
        if args.build_only:
            for name, lib in libs.items():
                print(f"{name}: {lib}")
            return 0
        rows = []
        for r in range(args.rounds):
            for name in round_order(names, r):
                print(f"round {r + 1}/{args.rounds}: {name} ...", flush=True)
                timed = run_variant(name, libs[name], cases, args.replays)
                rows += [dict(variant=name, round=r + 1, **row) for row in timed]
        write_csv(rows, out / "ab.csv")
        print(summarise(rows, names))
        print(f"every round: {out / 'ab.csv'}")
        return 0
    except AbError as e:
        print(f"python -m trt_gn.lab.ab: error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
