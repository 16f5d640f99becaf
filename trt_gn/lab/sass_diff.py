"""Whether a change left kernels' machine code as it was: the SASS of every kernel of an old build
against the same kernel of a new build, function by function.

    python -m trt_gn.lab.sass_diff OLD_OBJECTS NEW_OBJECTS

Each argument is a folder of a CMake build's kernel objects (`<build>/CMakeFiles/
trt_gn_kernels_obj.dir/kernels`, built for the same architecture, e.g. sm_90). Kernels are matched
by demangled name; a kernel that gained a trailing bool template parameter matches its old self
with that parameter false (how the kernels add a compile-time variant, e.g. the pre-add), and
`std::conditional<false, A, B>::type` reads as B. Instructions are compared without addresses,
encodings and branch targets. Prints "N of M pre-existing kernels identical", each one that differs
or has no counterpart, and the new kernels; exits 1 where one differs or is missing, so that "the
plain kernels are unchanged" is a check, not a claim. Needs cuobjdump (CUDA toolkit) and c++filt.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_MISSING

PROG = "python -m trt_gn.lab.sass_diff"
_FUNCTION = re.compile(r"\s*Function : (\S+)")
_INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*/\*")
_BRANCH = re.compile(r"(@!?U?P\d+ )?(BRA|BSSY|CALL|JMP|BRX|SYNCS|WARPSYNC)")
_CONDITIONAL = re.compile(r"std::conditional<false, [^<>]*(?:<[^<>]*>)?, ([^<>]*(?:<[^<>]*>)?)>::type")


def functions(obj: Path) -> dict[str, list[str]]:
    """Demangled kernel name -> its instructions (addresses and encodings dropped)."""
    out = subprocess.run(["cuobjdump", "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    funcs: dict[str, list[str]] = {}
    name = None
    for line in out.splitlines():
        m = _FUNCTION.match(line)
        if m:
            name = m.group(1)
            funcs[name] = []
        elif name is not None and (m := _INSTRUCTION.match(line)):
            ins = re.sub(r"\s+", " ", m.group(1))
            funcs[name].append(re.sub(r"0x[0-9a-f]+", "ADDR", ins) if _BRANCH.match(ins) else ins)
    names = list(funcs)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    return {_CONDITIONAL.sub(r"\1", d): funcs[n] for n, d in zip(names, demangled)}


def compare(old_dir: Path, new_dir: Path) -> tuple[int, list[str], list[str]]:
    """(identical count, problems, new kernels) over the .cu objects of old_dir."""
    same, problems, new_only = 0, [], []
    for old_obj in sorted(old_dir.glob("*.cu.o")):
        new_obj = new_dir / old_obj.name
        if not new_obj.is_file():
            problems.append(f"{old_obj.name}: no such object in {new_dir}")
            continue
        old, new = functions(old_obj), functions(new_obj)
        matched = set()
        for name, body in old.items():
            hit = next((c for c in (name, re.sub(r">\(", ", false>(", name, count=1)) if c in new), None)
            if hit is None:
                problems.append(f"{old_obj.name}: {name}: no counterpart")
                continue
            matched.add(hit)
            if body == new[hit]:
                same += 1
            else:
                differ = sum(a != b for a, b in zip(body, new[hit])) + abs(len(body) - len(new[hit]))
                problems.append(f"{old_obj.name}: {name}: DIFFERENT ({len(body)} vs {len(new[hit])} instructions, "
                                f"{differ} differ)")
        new_only += [f"{old_obj.name}: {n}" for n in new if n not in matched]
    return same, problems, new_only


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", type=Path, help="the old build's kernel objects folder")
    p.add_argument("new", type=Path, help="the new build's kernel objects folder")
    args = p.parse_args(argv)
    for folder in (args.old, args.new):
        if not folder.is_dir() or not any(folder.glob("*.cu.o")):
            print(f"{PROG}: error: {folder} is not a folder of .cu.o objects", file=sys.stderr)
            return EXIT_BAD_INPUT
    missing = [tool for tool in ("cuobjdump", "c++filt") if shutil.which(tool) is None]
    if missing:
        print(f"{PROG}: error: needs {' and '.join(missing)} on PATH (the CUDA toolkit's cuobjdump; binutils' "
              "c++filt)", file=sys.stderr)
        return EXIT_MISSING
    same, problems, new_only = compare(args.old, args.new)
    total = same + sum(1 for line in problems if "DIFFERENT" in line or "no counterpart" in line)
    print(f"{same} of {total} pre-existing kernels identical (instructions, modulo addresses)")
    for line in problems:
        print(f"  {line}")
    print(f"{len(new_only)} new kernels")
    return EXIT_FAILED if problems else 0


if __name__ == "__main__":
    sys.exit(main())
