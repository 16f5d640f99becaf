"""python -m trt_gn.lab.ab, the A/B timing tool of the kernel notes: its options and messages, its
table, and a real build of a git revision's kernels library (timing itself needs a GPU:
tests/gpu/test_gpu_bench.py)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trt_gn.lab import ab

# The checkout: the tool runs from it (`python -m` finds its trt_gn there) and builds its revisions.
ROOT = Path(__file__).resolve().parents[1]
HAVE_GIT_CHECKOUT = (ROOT / ".git").exists()
PROG = "python -m trt_gn.lab.ab"


def run(*args):
    return subprocess.run([sys.executable, "-m", "trt_gn.lab.ab", *args], capture_output=True, text=True, cwd=ROOT)


def test_help():
    proc = run("--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())  # argparse wraps to the terminal's width
    for part in ("--variant NAME=SOURCE", "--build-only", "(default: the whole shape list)",
                 "each variant runs in a process of its own"):
        assert part in text
    assert "--worker" not in proc.stdout


@pytest.mark.parametrize("args, message", [
    ((), "no --variant given: name at least one, e.g. --variant old=HEAD~1 --variant new=."),
    (("--variant", "x"), "--variant 'x': expected NAME=SOURCE (a git revision, a directory or a .so)"),
    (("--variant", "a b=HEAD"), "--variant 'a b=HEAD': the name may hold only letters, digits, '_' and '-'"),
    (("--variant", "a=HEAD", "--variant", "a=HEAD"), "--variant names must differ: a, a"),
    (("--variant", "a=no-such-revision"),
     f"variant a: 'no-such-revision' is neither a git revision of {ROOT}, a directory nor a .so file"),
    (("--variant", "a=/nonexistent/x.so"), "variant a: no library file /nonexistent/x.so"),
    (("--variant", "a=HEAD", "--shapes", "1/65/8/8/32"),
     "shape '1/65/8/8/32': N, C, H, W and G must be >= 1 and C divisible by G"),
    (("--variant", "a=HEAD", "--shapes", "sd15-unet-320"),
     "shape 'sd15-unet-320': expected a name from the shape list or N/C/H/W/G[/EPS]"),
    (("--variant", "a=HEAD", "--dtypes", "fp8"), "--dtypes 'fp8': expected a comma-separated list of fp16, bf16, fp32"),
    (("--variant", "a=HEAD", "--layouts", "nhwc,hwc8"),
     "--layouts 'nhwc,hwc8': expected a comma-separated list of nhwc, nchw"),
    (("--variant", "a=HEAD", "--replays", "29"), "--replays must be >= 30, got 29"),
    (("--variant", "a=HEAD", "--rounds", "0"), "--rounds must be >= 1, got 0"),
])
def test_bad_options(tmp_path, args, message):
    if not HAVE_GIT_CHECKOUT and "HEAD" in " ".join(args):
        pytest.skip("no git checkout here: HEAD names nothing")
    out = tmp_path / "out"
    proc = run(*args, "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr == f"{PROG}: error: {message}\n"
    assert not out.exists()  # nothing written


def test_directory_without_sources(tmp_path):
    proc = run("--variant", f"a={tmp_path}", "--build-only", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr == f"{PROG}: error: variant a: {tmp_path} is a directory without plugin_src/CMakeLists.txt\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: timing would run")
def test_timing_needs_a_gpu(tmp_path):
    lib = tmp_path / "libtrt_gn_kernels.so"
    lib.write_bytes(b"")
    proc = run("--variant", f"a={lib}", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr == (f"{PROG}: error: no CUDA device: timing needs a GPU (torch.cuda.is_available() is False); "
                           "--build-only builds without one\n")
    assert not (tmp_path / "out").exists()


def test_round_order():
    names = ["old", "new", "x"]
    assert [ab.round_order(names, r) for r in range(4)] == [
        ["old", "new", "x"], ["new", "x", "old"], ["x", "old", "new"], ["old", "new", "x"]]


def test_summarise():
    def row(variant, rnd, case, us, copy, check="ok"):
        return dict(variant=variant, round=rnd, case=case, us_per_launch=us, copy_us=copy, check=check)

    rows = [
        row("old", 1, "sd15-unet-320x64 fp16 nhwc", 8.10, 3.05),
        row("new", 1, "sd15-unet-320x64 fp16 nhwc", 7.90, 3.00),
        row("new", 2, "sd15-unet-320x64 fp16 nhwc", 7.70, 3.10),
        row("old", 2, "sd15-unet-320x64 fp16 nhwc", 8.00, 3.02),
        row("old", 1, "1/512/64/64/32 bf16 nchw", 6.00, 2.00),
        row("new", 1, "1/512/64/64/32 bf16 nchw", 5.50, 2.10, "FAIL 3 of 2097152 elements out of tolerance"),
    ]
    # Cells are separated by two spaces or more.
    table = [re.split(" {2,}", line) for line in ab.summarise(rows, ["old", "new"]).splitlines()]
    assert table == [
        ["case", "old us", "new us", "new - old", "copy us", "checks"],
        ["sd15-unet-320x64 fp16 nhwc", "8.00 (8.00-8.10)", "7.70 (7.70-7.90)", "-0.30", "3.00", "ok"],
        ["1/512/64/64/32 bf16 nchw", "6.00 (6.00-6.00)", "5.50 (5.50-5.50)", "-0.50", "2.00",
         "new: FAIL 3 of 2097152 elements out of tolerance"],
    ]


def test_csv_written_whole(tmp_path):
    rows = [dict(variant="a", round=1, case="c fp16 nhwc", us_per_launch=1.5, copy_us=1.0, check="ok")]
    ab.write_csv(rows, tmp_path / "ab.csv")
    assert (tmp_path / "ab.csv").read_text().splitlines() == [
        "variant,round,case,us_per_launch,copy_us,check", "a,1,c fp16 nhwc,1.5,1.0,ok"]
    assert [p.name for p in tmp_path.iterdir()] == ["ab.csv"]


@pytest.mark.skipif(not HAVE_GIT_CHECKOUT, reason="no git checkout here: nothing to archive")
def test_build_a_revision(tmp_path):
    """A git revision's plugin_src is archived and its kernels library built (sm_90; nvcc, no GPU)."""
    if shutil.which("nvcc") is None or shutil.which("cmake") is None:
        pytest.skip("nvcc or cmake is not on PATH")
    proc = run("--variant", "head=HEAD", "--build-only", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lib = tmp_path / "build" / "head" / "libtrt_gn_kernels.so"
    assert proc.stdout.splitlines()[-1] == f"head: {lib}"
    assert (tmp_path / "src" / "head" / "plugin_src" / "CMakeLists.txt").is_file()
    header = (ROOT / "plugin_src" / "include" / "trt_gn" / "group_norm.h").read_text()
    abi = int(header.split("#define TRTGN_ABI_VERSION")[1].split()[0])
    assert ctypes.CDLL(str(lib)).trtgn_abi_version() == abi


@pytest.mark.skipif(not HAVE_GIT_CHECKOUT, reason="no git checkout here: nothing to archive")
def test_archive_reuses_one_commit_and_replaces_another(tmp_path):
    """The same commit keeps its sources and build (unchanged files, an incremental build); another
    commit under the same name replaces both, since its files' times may predate the old objects."""
    head = ab.git_commit("HEAD")
    src = ab.archive("v", "HEAD", tmp_path)
    assert (src / ".commit").read_text() == head
    assert (src / "plugin_src" / "CMakeLists.txt").is_file()
    marker = tmp_path / "build" / "v" / "marker"
    marker.parent.mkdir(parents=True)
    marker.write_text("")
    assert ab.archive("v", head, tmp_path) == src and marker.exists()
    parent = ab.git_commit("HEAD~1")
    if parent is None:
        pytest.skip("a shallow clone: HEAD has no parent here")
    ab.archive("v", "HEAD~1", tmp_path)
    assert (src / ".commit").read_text() == parent
    assert not marker.exists()


def test_a_revision_without_a_git_checkout_names_the_staging_script(tmp_path, monkeypatch):
    monkeypatch.setattr(ab, "REPO", tmp_path)  # a copy of the tree without its .git folder
    with pytest.raises(ab.AbError) as info:
        ab.source_kind("old", "HEAD~1")
    assert str(info.value) == (f"variant old: 'HEAD~1' is neither a directory nor a .so file, and {tmp_path} is no "
                               "git checkout to find a revision in (scripts/stage_old_source.sh REV stages a "
                               "revision's source as a directory)")


@pytest.mark.parametrize("built_commit, kept", [("c0ffee", True), ("beef", False), (None, False)])
def test_a_staged_folder_of_another_commit_is_built_afresh(tmp_path, built_commit, kept):
    """A source folder naming its commit (.commit) reuses a build of that commit only: another
    commit's files may predate the objects there. The build itself is made to stop at configure."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not on PATH")
    src = tmp_path / "old-src"
    (src / "plugin_src").mkdir(parents=True)
    (src / "plugin_src" / "CMakeLists.txt").write_text('message(FATAL_ERROR "configure stops here")\n')
    (src / ".commit").write_text("c0ffee")
    marker = tmp_path / "out" / "build" / "old" / "marker"
    marker.parent.mkdir(parents=True)
    marker.write_text("")
    if built_commit:
        (marker.parent / ".commit").write_text(built_commit)
    with pytest.raises(ab.AbError, match="^variant old: the build failed"):
        ab.build("old", src, tmp_path / "out", "90")
    assert marker.exists() == kept


@pytest.mark.skipif(not HAVE_GIT_CHECKOUT, reason="no git checkout here: nothing to archive")
def test_stage_old_source(tmp_path):
    """scripts/stage_old_source.sh writes a revision's plugin_src/ and its commit into a folder the
    A/B tool builds from, replaces only a folder it staged, and refuses what it cannot do."""
    script = ["bash", str(ROOT / "scripts" / "stage_old_source.sh")]
    dest = tmp_path / "old-src"
    proc = subprocess.run(script + ["--dest", str(dest), "HEAD"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    head = ab.git_commit("HEAD")
    assert proc.stdout.startswith(f"staged plugin_src/ of HEAD ({head}) in {dest} (")
    assert (dest / ".commit").read_text() == head
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", head, "plugin_src"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and p.name != ".commit") == \
        sorted(tracked)
    assert ab.source_kind("old", str(dest)) == "dir"
    again = subprocess.run(script + ["--dest", str(dest), "HEAD"], capture_output=True, text=True)
    assert again.returncode == 0 and (dest / ".commit").read_text() == head
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old-src"]  # no temporary folder left

    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep").write_text("x")
    for args, message in (
            (["--dest", str(other), "HEAD"], f"{other} exists and was not staged by this script: it is left as it is"),
            (["--dest", str(dest), "no-such-revision"], f"'no-such-revision' names no commit of {ROOT}"),
            (["--dest", str(dest)], "no revision given")):
        proc = subprocess.run(script + args, capture_output=True, text=True)
        assert proc.returncode == 2
        assert proc.stderr.splitlines()[0] == f"stage_old_source.sh: error: {message}"
    assert (other / "keep").read_text() == "x" and (dest / ".commit").read_text() == head
