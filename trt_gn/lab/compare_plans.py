"""Compare two plan dumps of `trt-gn fuzz --plans` (two builds, the same seed and cases).

Cases are matched by their spec; each plan is compared on the keys both dumps have (a newer build
may report more). Prints the count of cases that differ and the first few; exits 1 if any differs
or the dumps hold different cases.

    python -m trt_gn.lab.compare_plans old.csv new.csv
"""

from __future__ import annotations

import argparse
import csv
import sys

from ..abi import parse_plan


def read(path: str) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {row["case"]: parse_plan(row["plan"]) for row in csv.DictReader(f)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trt_gn.lab.compare_plans", description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--show", type=int, default=10, help="differences printed (default: 10)")
    args = parser.parse_args(argv)
    old, new = read(args.old), read(args.new)
    if old.keys() != new.keys():
        print(f"the dumps hold different cases: {len(old.keys() - new.keys())} only in {args.old}, "
              f"{len(new.keys() - old.keys())} only in {args.new}")
        return 1
    differ = []
    for case, a in old.items():
        b = new[case]
        keys = [k for k in a if k in b]
        if any(a[k] != b[k] for k in keys):
            differ.append((case, " ".join(f"{k}={a[k]}" for k in keys), " ".join(f"{k}={b[k]}" for k in keys)))
    for case, a, b in differ[: args.show]:
        print(f"{case}\n  old: {a}\n  new: {b}")
    print(f"{len(old)} cases, {len(differ)} plans differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
