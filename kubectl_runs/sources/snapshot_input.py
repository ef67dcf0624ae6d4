"""What a ``--snapshot`` path may be, and how much of it is read (docs/commands.md, "Snapshot input").

A snapshot is a file, a directory of files, a pipe or stdin. Anything else — ``/dev/zero``, ``/dev/urandom``, a
terminal, a disk — is refused by what it is, before a byte is read. What is read is bounded: at most
``max_bytes()`` (2 GiB, ``KUBECTL_RUNS_MAX_SNAPSHOT_BYTES`` to change it) from each file or stream, a regular
file refused by its size before it is read. What is not a snapshot is refused from its first bytes: binary data
(a NUL byte: no JSON or YAML text holds one, UTF-16/32 with a byte-order mark aside), or text whose first line
is neither JSON (``{``, ``[``) nor a YAML mapping key or sequence item (``yes |`` is refused at ``y``). A named
pipe (FIFO) is opened without blocking: a program has ``PIPE_WAIT_SECONDS`` to start writing into it, else the
pipe is refused as one that nothing writes to. Every refusal is one line naming the file.
"""

from __future__ import annotations

import os
import re
import select
import stat
import sys
import time
from typing import Any, BinaryIO

from ..errors import ExitCode, UserError

DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB: ~4 million leases as `snapshot save` writes them
MAX_BYTES_ENV = "KUBECTL_RUNS_MAX_SNAPSHOT_BYTES"
SNIFF_BYTES = 64 << 10  # what the first-bytes check looks at
CHUNK_BYTES = 1 << 20  # a stream is read in pieces of this size, each checked for NUL bytes
PIPE_WAIT_SECONDS = 3.0  # how long a named pipe may go without a writer

_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"))
_SIZE = re.compile(r"^\s*([0-9]+)\s*(|Ki|Mi|Gi|Ti|K|M|G|T)B?\s*$")
_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "K": 10**3, "M": 10**6, "G": 10**9,
          "T": 10**12}
_KEY_LINE = re.compile(r"^(?:[^\n]{0,1024}?:(?:[ \t]|$)|[?!&]|-(?:[ \t]|$))")  # a mapping key, a tag or anchor, an item


def max_bytes() -> int:
    """The most read from one file or stream: ``KUBECTL_RUNS_MAX_SNAPSHOT_BYTES`` (``500Mi``, ``4Gi``, bytes), else
    2 GiB."""
    text = os.environ.get(MAX_BYTES_ENV)
    if text is None or not text.strip():
        return DEFAULT_MAX_BYTES
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) == 0:
        raise UserError(f"{MAX_BYTES_ENV}: {text!r} is not a size in bytes (examples: 500Mi, 4Gi, 1000000)",
                        ExitCode.USAGE)
    return int(match.group(1)) * _UNITS[match.group(2)]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def too_large(name: str, size: int | None, limit: int) -> UserError:
    what = f"is {_size(size)}, more" if size is not None else "goes on for more"
    return UserError(f"{name}: {what} than the {_size(limit)} a snapshot may be (set {MAX_BYTES_ENV} to read "
                     "more)")


def check_start(name: str, head: bytes) -> None:
    """Refuse ``head`` (a file's first bytes) when no snapshot begins so: binary data, or text whose first line is
    not JSON, a YAML mapping key or a sequence item. Text the check cannot decide goes on to the parser."""
    text = None
    for bom, codec in _BOMS:
        if head.startswith(bom):
            text = head[len(bom):].decode(codec, errors="ignore")
            break
    if text is None:
        nul = head.find(b"\0")
        if nul >= 0:
            raise UserError(f"{name}: binary data (a NUL byte at offset {nul}), not a snapshot: a snapshot is JSON "
                            "or YAML text")
        text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("---"):
            line = line[3:].strip()
        if not line or line.startswith(("#", "%", "...")):
            continue
        if line.startswith(("{", "[")) or _KEY_LINE.match(line):
            return
        shown = line[:40] + ("…" if len(line) > 40 else "")
        raise UserError(f"{name}: not a snapshot: it begins with {shown!r} (a snapshot is JSON, or YAML "
                        "whose documents are Kubernetes objects: apiVersion:, kind:, …)")


def _pieces(stream: BinaryIO, first: bytes) -> Any:
    if first:
        yield first
    while chunk := stream.read(CHUNK_BYTES):
        yield chunk


def read_stream(name: str, stream: BinaryIO, limit: int, first: bytes = b"") -> bytes:
    """The rest of ``stream`` (after ``first``, already read from it), checked and bounded as it comes."""
    chunks: list[bytes] = []
    total = 0
    checked = binary_ok = False
    try:
        for chunk in _pieces(stream, first):
            if not total:
                binary_ok = chunk.startswith(tuple(bom for bom, _ in _BOMS))
            total += len(chunk)
            chunks.append(chunk)
            nul = -1 if binary_ok else chunk.find(b"\0")
            if nul >= 0:
                if not checked:
                    check_start(name, b"".join(chunks)[:SNIFF_BYTES])  # names the offset when it is in the first bytes
                raise UserError(f"{name}: binary data (a NUL byte at offset {total - len(chunk) + nul}), not a "
                                "snapshot: a snapshot is JSON or YAML text")
            if total > limit:
                raise too_large(name, None, limit)
            if not checked and total >= SNIFF_BYTES:
                check_start(name, b"".join(chunks)[:SNIFF_BYTES])
                checked = True
        if not checked:
            check_start(name, b"".join(chunks))
        return b"".join(chunks)
    except MemoryError:
        chunks.clear()
        raise UserError(f"{name}: not enough memory to read it ({_size(total)} read; the most read is "
                        f"{_size(limit)}, {MAX_BYTES_ENV})") from None


def read_stdin(stream: Any, limit: int) -> bytes:
    if stream is None:
        if sys.stdin is None:
            raise UserError("<stdin>: there is no standard input to read a snapshot from")
        stream = sys.stdin.buffer
        try:
            if os.isatty(stream.fileno()):
                raise UserError("<stdin>: is a terminal: pipe a snapshot into --snapshot - (kubectl get … -o yaml | "
                                "kubectl runs … --snapshot -)")
        except (AttributeError, OSError, ValueError):
            pass
    return read_stream("<stdin>", stream, limit)


_NOT_FILES = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _refuse_kind(path: str, mode: int) -> None:
    for test, what in _NOT_FILES:
        if test(mode):
            raise UserError(f"{path}: {what}, not a snapshot file (give a file, a directory, or - for stdin)")


def read_path(path: str, limit: int) -> bytes:
    """A file's or a named pipe's bytes; OSError as ``open`` raises it (the caller names it)."""
    from .file_bytes import read_bytes

    _refuse_kind(path, os.stat(path).st_mode)  # (a device is never opened: opening some has effects)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        _refuse_kind(path, info.st_mode)
        if stat.S_ISFIFO(info.st_mode):
            return read_stream(path, handle, limit, _first_from_pipe(path, fd))
        os.set_blocking(fd, True)
        if info.st_size > limit:
            raise too_large(path, info.st_size, limit)
        check_start(path, os.pread(fd, SNIFF_BYTES, 0))
        try:
            data = read_bytes(handle)
        except MemoryError:
            raise UserError(f"{path}: not enough memory to read it ({_size(info.st_size)})") from None
        if len(data) > limit:  # it grew while it was read
            raise too_large(path, len(data), limit)
        return data


def _first_from_pipe(path: str, fd: int) -> bytes:
    """The first bytes of a pipe opened without blocking, waiting at most ``PIPE_WAIT_SECONDS`` for a writer;
    then the pipe blocks again, as any stream read to its end."""
    deadline = time.monotonic() + PIPE_WAIT_SECONDS
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        try:
            first = os.read(fd, SNIFF_BYTES)
        except BlockingIOError:  # a writer has it open and has not written yet
            first = b""
            break
        if first:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise UserError(f"{path}: a named pipe (FIFO) that nothing is writing into: nothing came in "
                            f"{PIPE_WAIT_SECONDS:g} s (start the writer first, or pipe into --snapshot -)")
        events = poller.poll(min(left, 0.1) * 1000)
        if any(event & select.POLLHUP and not event & select.POLLIN for _, event in events):
            return b""  # a writer came and went without writing: empty
    os.set_blocking(fd, True)
    return first
