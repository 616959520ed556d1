"""Atomic writes: a file or directory appears complete under its final name, or not at all.

Everything the tool writes for a user (tables, bundles, saved predictors, reports, traces, configs) goes through
these helpers, so an interrupted or failing write never leaves a half-written result behind.

* The result gets the permissions of an ordinary write (``0666``/``0777`` less the umask), not the private
  ``0600``/``0700`` of the temporary it was written to.
* An output path that cannot be written (no permission, a file where a directory should be, a read-only file
  system) is an :class:`~hybrid.errors.OutputPathError` naming the path the user gave and the reason, never a
  raw ``PermissionError`` about a temporary name.
* The temporary is removed on any exception, including ``KeyboardInterrupt`` and the ``SIGTERM`` the CLI turns
  into an exception (:func:`hybrid.cli.main.main`).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hybrid.errors import OutputPathError

_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a parent is a file, not a directory",
    errno.EEXIST: "a parent is a file, not a directory",
    errno.ENOENT: "the directory cannot be created there",
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EISDIR: "it is a directory",
    errno.ENAMETOOLONG: "file name too long",
}


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux ``/proc``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_error(path: str | os.PathLike, exc: OSError) -> OutputPathError:
    """A one-line :class:`OutputPathError` for an ``OSError`` met while writing ``path``."""
    reason = _REASONS.get(exc.errno or -1) or (exc.strerror or type(exc).__name__).lower()
    return OutputPathError(f"cannot write output {os.fspath(path)}: {reason}")


def check_creatable(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`Path` if a file (or directory) can be created there: its nearest existing ancestor is a
    directory this process may write into. Else :class:`OutputPathError` now, before the work whose result it is
    (a profile, a search, a campaign found out when the write failed, after it)."""
    target = Path(path)
    ancestor = target.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"cannot write output {target}: {ancestor} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"cannot write output {target}: no permission to create files in {ancestor}")
    return target


def _prepare_parent(target: Path) -> None:
    if target.exists() and target.is_dir() and not target.is_symlink():
        raise OutputPathError(f"cannot write output {target}: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(target, exc) from None
    if not target.parent.is_dir():
        raise OutputPathError(f"cannot write output {target}: a parent is a file, not a directory")


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``, on error removed.

    >>> with atomic_file("out.csv") as tmp:      # doctest: +SKIP
    ...     frame.to_csv(tmp, index=False)
    """
    target = Path(path)
    try:
        st = os.stat(target)  # follows links
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        # a device, pipe or socket (/dev/stdout, /dev/null, a FIFO): a stream, written through, never replaced
        with _streamed(target) as tmp:
            yield tmp
        return
    if target.is_symlink() and st is not None:  # write through the link: the file it names is replaced
        target = Path(os.path.realpath(target))
    _prepare_parent(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise OutputPathError(f"cannot write output {target}: no permission to create files in "
                                  f"{target.parent}") from None
        if exc.errno == errno.ENOENT and target.parent.is_dir():  # e.g. /proc: the directory is there
            raise OutputPathError(f"cannot write output {target}: files cannot be created in {target.parent}") from None
        raise output_error(target, exc) from None  # read-only file system, missing directory, ...: say which
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except OSError as exc:
            if exc.filename is not None and os.fspath(exc.filename) in (tmp, os.fspath(target)):
                raise output_error(target, exc) from None
            raise
        # a new file gets the umask's mode (mkstemp's is 0600); a replaced file keeps its own
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = 0o666 & ~current_umask()
        os.chmod(tmp, mode)
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise output_error(target, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _streamed(target: Path) -> Iterator[Path]:
    """Yield a private temporary file; on success copy it into ``target`` (a device or pipe), then remove it."""
    fd, tmp = tempfile.mkstemp(prefix=".hybrid-stream.", suffix=f".{target.name}.tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        try:
            with open(tmp, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except OSError as exc:
            raise output_error(target, exc) from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path``; on success it replaces ``path`` (an existing
    directory there is moved aside first and deleted after the swap), on error it is deleted."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise output_error(target, exc) from None
    try:
        yield tmp
        tmp.chmod(0o777 & ~current_umask())
        try:
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.replace(target, old)
                os.replace(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, target)
        except OSError as exc:
            raise output_error(target, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
