"""The tensor-file writer process: runs as a script (standard library only), fed by :class:`ProcessWriter`.

The training process copies each file's bytes into a shared memory arena and sends one small record
down a pipe; this process writes the files, so the training process spends no time (and takes no
interpreter lock) on file system calls. Each file is written to a temporary name and renamed, so
whoever reads the directory sees whole files or none. When the pipe closes (the training process
finished, or died) every record already sent is still written before this process exits.

Record (little endian): op (1 byte), arena offset, file size, arena span to release (8 bytes each),
path length, link-source length (2 bytes each), then the two paths as UTF-8. Ops: write a file from the
arena, hard-link a file written before, remove a file (a step's journal, once its dump.json is written).
Records are carried out in order: a step's dump.json, sent after its tensor files, lands after them.

The arena's first page is the control block this process updates: bytes released and records done
(8 bytes each), an error flag, then the first error's text.

    python writer_proc.py CONTROL_FD ARENA_FD ARENA_BYTES FILE_MODE
"""
import mmap
import os
import struct
import sys
import threading

if __package__:
    from dumpers import atomic
else:                                  # run as a script (no site, no package): load the one module it needs by path
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "_msprobe_atomic", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "atomic.py"))
    atomic = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(atomic)

RECORD = struct.Struct("<BQQQHH")
OP_WRITE, OP_LINK, OP_REMOVE = 1, 2, 3
CONTROL = struct.Struct("<QQQ")        # released bytes, records done, error flag
CONTROL_BYTES = 4096
ERROR_AT = 64


def write(view: memoryview, path: str, mode: int) -> None:
    """``view``'s bytes as the file ``path`` (:func:`dumpers.atomic.write_bytes`)."""
    atomic.write_bytes(path, view, mode=mode)


def link(source: str, path: str, mode: int) -> None:
    """``path`` as a hard link of ``source`` (:func:`dumpers.atomic.link_or_copy`)."""
    atomic.link_or_copy(source, path, mode=mode)


def remove(path: str) -> None:
    """``path`` removed (already gone: nothing to do)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def error_text(exc: OSError, path: str) -> bytes:
    """The control block's error: ``ERRNO PATH\\x01TEXT`` (the training process rebuilds the OSError)."""
    text = f"{exc.errno or 0} {path}\x01{exc.strerror or exc}".encode("utf-8", "replace")
    return text[: CONTROL_BYTES - ERROR_AT - 1]


PREALLOCATE_CHUNK = 8 << 20


def preallocate(arena_fd: int, size: int) -> None:
    """Give the arena its memory now, from the start, on this process's core: the training process then
    copies into pages that exist instead of allocating and zeroing each one as it first touches it (a
    tensor dump's first step copies hundreds of MB). A failure changes nothing but that speed."""
    try:
        for start in range(0, size, PREALLOCATE_CHUNK):
            os.posix_fallocate(arena_fd, start, min(PREALLOCATE_CHUNK, size - start))
    except OSError:
        pass


def serve(control_fd: int, arena_fd: int, size: int, mode: int) -> None:
    threading.Thread(target=preallocate, args=(arena_fd, size), daemon=True).start()
    arena = mmap.mmap(arena_fd, size)
    view = memoryview(arena)
    records = os.fdopen(control_fd, "rb", buffering=1 << 16)
    released = done = 0
    failed = False
    while True:
        head = records.read(RECORD.size)
        if len(head) < RECORD.size:
            break                      # the training process closed the pipe (or exited)
        op, offset, nbytes, span, path_len, link_len = RECORD.unpack(head)
        path = records.read(path_len).decode("utf-8", "surrogateescape")
        link_path = records.read(link_len).decode("utf-8", "surrogateescape") if link_len else ""
        if not failed:
            try:
                if op == OP_WRITE:
                    write(view[offset:offset + nbytes], path, mode)
                elif op == OP_LINK:
                    link(link_path, path, mode)
                elif op == OP_REMOVE:
                    remove(path)
            except OSError as exc:     # full disk, permissions: reported once, later files skipped
                failed = True
                text = error_text(exc, path)
                arena[ERROR_AT:ERROR_AT + len(text) + 1] = text + b"\0"
        released += span
        done += 1
        CONTROL.pack_into(arena, 0, released, done, 1 if failed else 0)
    view.release()
    arena.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 8))
