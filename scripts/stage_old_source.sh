#!/usr/bin/env bash
# Stage a revision's kernels source as a plain folder, for where no .git folder is: the GPU
# machine gets a copy of the working tree without it, so its `plans` and `ab` stages cannot
# archive a revision there. See --help.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prog="stage_old_source.sh"
dest_default=".carry/old-src"

usage() {
    cat <<EOF
usage: bash scripts/stage_old_source.sh [--dest DIR] REV

Writes plugin_src/ of the git revision REV (what trt_gn/lab/ab.py builds a kernels library from)
into DIR, with the commit in DIR/.commit, replacing a folder this script staged before. Then carry
DIR to the GPU machine and name it there:

  AB_OLD_SRC=$dest_default bash scripts/gpu_check.sh plans ab

  --dest DIR   where to stage (default: $dest_default in the checkout, git-ignored)

exit codes: 0 staged; 1 the archive failed; 2 bad arguments, no such revision or a DIR this
script did not stage; 3 git or tar missing.
EOF
}

die() { echo "$prog: error: $1" >&2; [ -n "${2:-}" ] && echo "  hint: $2" >&2; exit "${3:-2}"; }

dest="$repo/$dest_default"
rev=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --dest) [ $# -ge 2 ] || die "--dest needs a folder"; dest="$2"; shift 2 ;;
        --dest=*) dest="${1#--dest=}"; shift ;;
        -*) die "unknown option $1" "bash scripts/stage_old_source.sh --help" ;;
        *) [ -z "$rev" ] || die "one revision only, got '$rev' and '$1'"; rev="$1"; shift ;;
    esac
done
[ -n "$rev" ] || die "no revision given" "bash scripts/stage_old_source.sh main"
[ -n "$dest" ] || die "--dest is empty"
for tool in git tar; do
    command -v "$tool" >/dev/null || die "$tool is not on PATH" "" 3
done
git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 \
    || die "$repo is no git checkout: nothing to archive a revision from"
commit=$(git -C "$repo" rev-parse --verify --quiet "$rev^{commit}") \
    || die "'$rev' names no commit of $repo" "git -C $repo log --oneline -5"
git -C "$repo" cat-file -e "$commit:plugin_src/CMakeLists.txt" 2>/dev/null \
    || die "revision '$rev' ($commit) has no plugin_src/CMakeLists.txt"
if [ -e "$dest" ] && { [ ! -d "$dest" ] || [ ! -f "$dest/.commit" ]; }; then
    die "$dest exists and was not staged by this script: it is left as it is" "name another folder with --dest"
fi

# Extracted beside DIR, then swapped in: an interrupted or failed run leaves DIR as it was.
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$dest.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git -C "$repo" archive "$commit" plugin_src | tar -x -C "$tmp" || die "git archive of $commit failed" "" 1
printf '%s' "$commit" >"$tmp/.commit"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "staged plugin_src/ of $rev ($commit) in $dest ($(du -sh "$dest" | cut -f1))"
