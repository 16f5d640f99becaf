"""The one way trt_gn writes files: nothing is ever half-written.

Every output is first written under a temporary name in the output's own folder (same file
system), then published with one ``os.replace``/``os.rename``. On any failure, interrupt
included, the temporary files go and what was there before stays. New files and folders get the
mode the umask gives (``0o666 & ~umask``, ``0o777 & ~umask``), not mkstemp's 0600 / mkdtemp's 0700.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

_umask_lock = threading.Lock()


def umask() -> int:
    """The process umask (read by setting and restoring it, under a lock)."""
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~umask()


def folder_mode() -> int:
    return 0o777 & ~umask()


def folder_of(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.parent if str(path.parent) else Path(".")


def writable_folder_problem(folder: str | os.PathLike) -> str | None:
    """None if a file can be created in `folder`, else why not. Creates and removes a temp file:
    os.access says yes for folders such as /proc or a read-only mount where creating fails."""
    folder = Path(folder)
    if not folder.is_dir():
        return "does not exist" if not folder.exists() else "is not a folder"
    try:
        fd, tmp = tempfile.mkstemp(prefix=".trt_gn-write-check.", dir=folder)
    except OSError as exc:
        return f"is not writable ({exc.strerror})"
    os.close(fd)
    os.unlink(tmp)
    return None


@contextlib.contextmanager
def staging_folder(parent: str | os.PathLike, name: str):
    """A fresh hidden folder in `parent` (umask mode), removed on exit with whatever is left in it."""
    stage = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=parent))
    try:
        os.chmod(stage, folder_mode())
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def publish_file(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Give the staged file the umask's mode and rename it onto `target` (same file system)."""
    os.chmod(staged, file_mode())
    os.replace(staged, target)


def write_bytes(path: str | os.PathLike, data) -> Path:
    """Write bytes (or any buffer) to `path` atomically: temp file, fsync, rename."""
    path = Path(path)
    with staging_folder(folder_of(path), path.name) as stage:
        tmp = stage / path.name
        with open(tmp, "wb") as f:
            f.write(memoryview(data))
            f.flush()
            os.fsync(f.fileno())
        publish_file(tmp, path)
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode())


def copy_file(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Byte-for-byte copy of `src` to `path`, atomically."""
    path = Path(path)
    with staging_folder(folder_of(path), path.name) as stage:
        tmp = stage / path.name
        shutil.copyfile(src, tmp)
        publish_file(tmp, path)
    return path


def publish_folder(staged: str | os.PathLike, target: str | os.PathLike, *, replace: bool) -> None:
    """Rename the finished folder `staged` to `target`. An existing `target` is replaced only with
    `replace`: it is moved aside first, put back if the rename fails, and removed after it."""
    staged, target = Path(staged), Path(target)
    os.chmod(staged, folder_mode())
    if not target.exists():
        os.rename(staged, target)
        return
    if not replace:
        raise FileExistsError(17, "exists", str(target))
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=folder_of(target)))
    try:
        os.rename(target, aside / "previous")
        try:
            os.rename(staged, target)
        except BaseException:
            os.rename(aside / "previous", target)
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
