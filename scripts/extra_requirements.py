"""The requirements of one extra of the installed trt_gn, for installing it without trt_gn's own
dependencies:

    pip install --no-deps trt_gn-*.whl
    python3 scripts/extra_requirements.py serve > serve.txt
    pip install --no-deps -r serve.txt
    python3 scripts/extra_requirements.py serve --check

The list is read from the installed package's metadata (pyproject.toml's
[project.optional-dependencies], as pip would read it), so the image (docker/Dockerfile) and its test
(tests/test_serve_extra.py) install exactly what the package declares. --check runs `pip check` and
fails when a package of the extra misses one of its own dependencies (the list must be closed, so
that --no-deps leaves nothing out) or another installed package conflicts with a version the extra
pins; trt_gn's own dependencies outside the extra are left out on purpose and not reported.

Exit codes: 0 done; 1 --check found a missing or mismatched dependency; 2 bad arguments (an extra
trt_gn does not declare, or a requirement with a marker other than the extra's).
Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys

DISTRIBUTION = "trt_gn"
_EXTRA_MARKER = re.compile(r"""^extra\s*==\s*["']([^"']+)["']$""")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_requirements(extra: str) -> list[str]:
    """The requirement strings of `extra` (without their marker), in declaration order."""
    found, extras = [], set()
    for requirement in importlib.metadata.requires(DISTRIBUTION) or []:
        spec, _, marker = requirement.partition(";")
        match = _EXTRA_MARKER.match(marker.strip())
        if marker.strip() and not match:
            raise ValueError(f"{DISTRIBUTION} requirement '{requirement}' has a marker this script does not "
                             f"evaluate; give extras plain requirements")
        if match:
            extras.add(match.group(1))
            if _normalized(match.group(1)) == _normalized(extra):
                found.append(spec.strip())
    if not found:
        raise ValueError(f"{DISTRIBUTION} declares no extra '{extra}' (it has: {', '.join(sorted(extras))})")
    return found


def _requirement_name(spec: str) -> str:
    return _normalized(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0])


def check(requirements: list[str]) -> list[str]:
    """`pip check` lines about the extra's packages: one of them missing a dependency, or another
    installed package at odds with the version the extra pins (empty: closed and consistent)."""
    names = {_requirement_name(r) for r in requirements}
    run = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    problems = []
    for line in run.stdout.splitlines():
        words = line.split()
        # "<pkg> <ver> requires <dep>, which is not installed." /
        # "<pkg> <ver> has requirement <spec>, but you have <dep> <ver>."
        have = words[words.index("have") + 1] if "have" in words[:-1] else ""
        if words and (_normalized(words[0]) in names or (have and _normalized(have) in names)):
            problems.append(line)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="extra_requirements.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("extra", help="the extra of the installed trt_gn, e.g. serve")
    parser.add_argument("--check", action="store_true",
                        help="check with `pip check` that the extra's packages have all their dependencies")
    args = parser.parse_args(argv)
    prog = "extra_requirements.py"
    try:
        requirements = extra_requirements(args.extra)
    except importlib.metadata.PackageNotFoundError:
        print(f"{prog}: error: {DISTRIBUTION} is not installed in {sys.prefix}", file=sys.stderr)
        print("  hint: pip install --no-deps trt_gn (the wheel or the repository) first", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if not args.check:
        print("\n".join(requirements))
        return 0
    problems = check(requirements)
    for line in problems:
        print(f"{prog}: error: {line}", file=sys.stderr)
    if problems:
        print(f"  hint: add the missing packages, pinned, to the '{args.extra}' extra in pyproject.toml",
              file=sys.stderr)
        return 1
    print(f"{prog}: the '{args.extra}' extra is complete: {len(requirements)} packages, each with its dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
