"""Bounded reads of outside input: files named by the env or a default, host fact files, and
local paths refused with the fix when they cannot name anything.

Every parser of outside input reads through here and parses with `inputs/parsers.py`; the
bounds themselves are `core/limits.py`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_HOST_FILE_BYTES,
    MAX_PATH_CHARS,
    MAX_PATH_PART_CHARS,
    decode_text,
)


def read_input_file(environ: Mapping[str, str], env_name: str, default: str, limit: int,
                    what: str, unreadable_default_ok: bool = False,
                    strict_utf8: bool = True) -> tuple[str | None, str]:
    """Text of the file named by `env_name` (else `default`), and its path.

    None when the default file is absent (or unreadable, if allowed; one over `limit` raises
    OSError `EFBIG` for the caller to say so); a file named explicitly must exist and be
    readable. The text is strict UTF-8 (else refused with the byte's offset); with
    `strict_utf8=False` undecodable bytes come back as lone surrogates (`surrogateescape`) for
    the caller to refuse where they matter.
    """
    explicit = environ.get(env_name)
    path = explicit or default
    try:
        data = read_bounded(Path(path), limit)
    except FileNotFoundError:
        if explicit:
            raise SpecDecodeConfigError(
                f"{env_name}={quote_value(path)} does not exist; mount {what} there or unset "
                "the variable") from None
        return None, path
    except (OSError, ValueError) as exc:
        if unreadable_default_ok and not explicit:
            if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
                raise
            return None, path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SpecDecodeConfigError(
            f"{env_name}={quote_value(path)} cannot be read ({reason}); point it "
            f"at {what} (at most {limit} bytes)") from None
    if not strict_utf8:
        return data.decode("utf-8", "surrogateescape"), path
    return decode_text(data, f"{path} (from {env_name})", f"write {what} as UTF-8"), path


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of the file at `path`: OSError when it is a directory, cannot be opened or is
    larger than `limit` bytes (read stops at `limit` + 1, so an endless file costs nothing)."""
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory", str(path))
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


_SPECIAL = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
            (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


class NotRegularFile(OSError):
    """A path that names something other than a regular file; `kind` says what
    ("a FIFO (named pipe)", "a directory", "a character device", ...)."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", str(path))
        self.kind = kind


def _kind(mode: int) -> str | None:
    return next((kind for test, kind in _SPECIAL if test(mode)), None)


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file (after symlinks), else
    `NotRegularFile`; other failures are the usual OSError. Never blocks: a FIFO without a
    writer, a socket or a device is refused from `stat` before any open, and the open itself
    is non-blocking and checked again (`fstat`), so a path swapped for a FIFO cannot hang it."""
    kind = _kind(os.stat(path).st_mode)
    if kind is not None:
        raise NotRegularFile(path, kind)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotRegularFile(path, kind)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int) -> bytes:
    """`read_bounded` for a regular file only (`open_regular`): what a user names on the
    command line, where a FIFO or a device must be refused rather than waited on."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def read_host_text(path: Path, limit: int = MAX_HOST_FILE_BYTES) -> str | None:
    """A host fact file (cgroup, /proc): its UTF-8 text, or None when it is absent, unreadable,
    larger than `limit` or not UTF-8 (the kernel writes neither; such a file tells nothing)."""
    try:
        return read_bounded(path, limit).decode("utf-8")
    except (OSError, ValueError):
        return None


def local_path(value: str, what: str) -> Path | None:
    """The local path `value` may name (`~` expanded), None when nothing is there.

    Values that cannot name anything are refused with the fix: longer than PATH_MAX, a part
    longer than NAME_MAX, a NUL character, `~user` of an unknown user.
    """
    shown = quote_value(value)
    if "\x00" in value:
        raise SpecDecodeConfigError(f"{what} {shown} contains a NUL character; fix the value")
    if len(value) > MAX_PATH_CHARS:
        raise SpecDecodeConfigError(
            f"{what} {shown} is longer than {MAX_PATH_CHARS} characters; give a path or a "
            "Hugging Face repo id")
    longest = max((len(part) for part in value.split("/")), default=0)
    if longest > MAX_PATH_PART_CHARS:
        raise SpecDecodeConfigError(
            f"{what} {shown} has a part of {longest} characters (a file name or repo id part "
            f"is at most {MAX_PATH_PART_CHARS}); fix the path")
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # "~nosuchuser/...": no home directory for that user
        user = value.split("/", 1)[0]
        raise SpecDecodeConfigError(
            f"{what} {shown} starts with {quote_value(user)}, and this host knows no home "
            "directory for that user; write the path out in full") from None
    try:
        os.stat(path)
    except (OSError, ValueError):
        return None
    return path


def path_exists(value: str, what: str) -> bool:
    return local_path(value, what) is not None
