"""The one way trt_gn writes files: nothing is ever half-written.

Every output is first written under a temporary name in the output's own folder (same file
system), then published with one ``os.replace``/``os.rename``. On any failure, interrupt
included, the temporary files go and what was there before stays. New files and folders get the
mode the umask gives (``0o666 & ~umask``, ``0o777 & ~umask``), not mkstemp's 0600 / mkdtemp's 0700.

An output is checked before any work (:func:`output_file_problem`, :func:`output_folder_problem`):
a file output is a regular file or nothing yet (never a folder, FIFO, device or socket, which a
rename would replace), and its name fits the file system's limit; the temporary names made from it
are shortened so that they fit too.

For tests of interrupts only: with the environment variable ``TRT_GN_TEST_PAUSE_BEFORE_PUBLISH``
set to a number of seconds, every publish waits that long first, with the output fully staged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

from .errors import Error

_umask_lock = threading.Lock()
PAUSE_BEFORE_PUBLISH_ENV = "TRT_GN_TEST_PAUSE_BEFORE_PUBLISH"
_RANDOM_CHARS = 8  # what tempfile puts between a prefix and a suffix


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


def name_max(folder: str | os.PathLike) -> int:
    """The longest file name (in bytes) the file system of `folder` takes (255 where it cannot say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def shorten(name: str, limit: int) -> str:
    """`name`, cut to at most `limit` bytes of UTF-8 (at a character boundary)."""
    return name.encode()[:max(limit, 0)].decode(errors="ignore")


def _temp_prefix(folder: str | os.PathLike, name: str, suffix: str) -> str:
    """The prefix ".<name>." of a temporary name in `folder`, `name` cut so that prefix, random part
    and `suffix` fit the file system's limit."""
    room = name_max(folder) - len(".") - len(".") - _RANDOM_CHARS - len(suffix.encode())
    return f".{shorten(name, room)}."


def file_kind(path: str | os.PathLike) -> str | None:
    """What is at `path`, following links: "file", "folder", "FIFO", "character device", "block
    device", "socket", "special file", or None where nothing is."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # no file can have that name
            return None
        raise
    for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def names_a_folder(path: str | os.PathLike) -> bool:
    """True for a path written as a folder: ending in a separator, or in "." or ".."."""
    text = os.fspath(path)
    seps = os.sep + (os.altsep or "")
    return text.endswith(tuple(seps)) or os.path.basename(text) in ("", ".", "..")


def output_file_problem(path: str | os.PathLike, example: str = "model.onnx") -> str | None:
    """None if a regular file can be written at `path` (checked before any work), else why not, as
    the text that follows "<path>: " in a message. `example` names a file for the hint of a folder."""
    text = os.fspath(path)
    path = Path(text)
    if names_a_folder(text):
        return f"names a folder, not a file; give a file name such as {path / example}"
    kind = file_kind(path)
    if kind == "folder":
        return f"is a directory; give a file name such as {path / example}"
    if kind not in (None, "file"):  # publishing renames a new file onto the path: it would replace it
        return f"is a {kind}, not a regular file, and would be replaced by one"
    parent = folder_of(path)
    if not parent.is_dir():
        return f"folder {parent} does not exist"
    problem = writable_folder_problem(parent)
    if problem:
        return f"folder {parent} {problem}"
    size, limit = len(path.name.encode()), name_max(parent)
    if size > limit:
        return f"its name is {size} bytes, over the file system's limit of {limit}"
    if kind == "file" and not os.access(path, os.W_OK):
        return "exists and is not writable"
    return None


def output_folder_problem(path: str | os.PathLike, *, parents: bool = True, replace: bool = False) -> str | None:
    """None if a folder can be made (or filled) at `path` (checked before any work), else why not, as
    the text that follows "<path>: " in a message. The one output-folder check of every command.

    parents: missing parent folders are made too (False: the parent must exist). replace: the folder
    is staged beside `path` and renamed over it (publish_folder), so its parent must take new entries,
    not the folder itself."""
    path = Path(path)
    kind = file_kind(path)
    if kind not in (None, "folder"):
        return "exists and is not a folder"
    if not parents and not folder_of(path).is_dir():
        return f"its parent {folder_of(path)} does not exist or is not a folder"
    start = folder_of(path) if replace else path
    existing = next(p for p in (start, *start.absolute().parents) if p.exists())
    if file_kind(existing) != "folder":
        return f"{existing} is not a folder"
    problem = writable_folder_problem(existing)
    if problem:
        return f"{existing} {problem}"
    for part in path.absolute().relative_to(existing.absolute()).parts:
        size, limit = len(part.encode()), name_max(existing)
        if size > limit:
            return f"the name {shorten(part, 16)}... is {size} bytes, over the file system's limit of {limit}"
    return None


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


_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupts_deferred():
    """SIGINT and SIGTERM held back while the body runs, and delivered after it: for steps that an
    interrupt must not cut in two (making a temporary folder and taking it in hand for removal;
    the renames that publish a model and its data)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def staging_folder(parent: str | os.PathLike, name: str):
    """A fresh hidden folder in `parent` (umask mode), removed on exit with whatever is left in it."""
    stage = None
    try:
        with interrupts_deferred():  # an interrupt right after mkdtemp would leave the folder
            stage = Path(tempfile.mkdtemp(prefix=_temp_prefix(parent, name, ".partial"), suffix=".partial",
                                          dir=parent))
        os.chmod(stage, folder_mode())
        yield stage
    finally:
        if stage is not None:
            remove_tree(stage)


def remove_tree(path: Path) -> None:
    """shutil.rmtree that an interrupt cannot cut short. A signal that came during a C call (a long
    write) is handled at the next bytecode, which may be inside the removal: the removal is then
    finished, and the interrupt raised after it."""
    interrupted = None
    with interrupts_deferred():
        while True:
            try:
                shutil.rmtree(path, ignore_errors=True)
                break
            except KeyboardInterrupt as exc:
                interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted


def pause_before_publish() -> None:
    """Wait the seconds of TRT_GN_TEST_PAUSE_BEFORE_PUBLISH, if set (for tests of interrupts)."""
    value = os.environ.get(PAUSE_BEFORE_PUBLISH_ENV)
    if not value:
        return
    try:
        seconds = float(value)
    except ValueError:
        raise Error(f"{PAUSE_BEFORE_PUBLISH_ENV}={value!r} is not a number of seconds") from None
    time.sleep(seconds)


@contextlib.contextmanager
def publish_lock(folder: str | os.PathLike):
    """An exclusive advisory lock (flock) on `folder` itself, for publishing several files into it
    as one step: trt_gn processes (and threads) publishing into one folder then do so one at a time.
    No lock file is made. Where the file system has no locks, publishing goes on unlocked: each
    file is still published whole; only runs that race to one output may leave an unused file."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
        yield
    finally:
        os.close(fd)  # releases the lock


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
        pause_before_publish()
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
        pause_before_publish()
        publish_file(tmp, path)
    return path


def publish_folder(staged: str | os.PathLike, target: str | os.PathLike, *, replace: bool) -> None:
    """Rename the finished folder `staged` to `target`. An existing `target` is replaced only with
    `replace`: it is moved aside first, put back if the rename fails, and removed after it."""
    staged, target = Path(staged), Path(target)
    pause_before_publish()
    os.chmod(staged, folder_mode())
    if not target.exists():
        os.rename(staged, target)
        return
    if not replace:
        raise FileExistsError(17, "exists", str(target))
    parent = folder_of(target)
    aside = Path(tempfile.mkdtemp(prefix=_temp_prefix(parent, target.name, ".old"), suffix=".old", dir=parent))
    try:
        os.rename(target, aside / "previous")
        try:
            os.rename(staged, target)
        except BaseException:
            os.rename(aside / "previous", target)
            raise
    finally:
        remove_tree(aside)
