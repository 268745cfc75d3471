"""The cache's trust boundary: a diskcache Disk that never unpickles, file/directory modes and
owner checks, and per-key locks with a timeout.

diskcache's own Disk pickles every value that is not str/bytes/int/float and unpickles any row
whose mode column says pickle (or whose key has raw=0): a row planted in the store runs code in
every process that reads it. SafeDisk stores only JSON (bytes fields tagged and base64'd), keys
only as raw str/bytes, and treats a pickle row, a non-raw key or a foreign value as corrupt.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import sqlite3
import stat
import time
from pathlib import Path

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW

from jitmarlin.settings import cache_shared_group, lock_timeout_s

log = logging.getLogger("jitmarlin")

MAGIC = b"JMJ1"  # every stored value starts with it: no other row is ours
MAX_VALUE_BYTES = 256 << 20  # a value file bigger than this is not one of ours: not read
_B64 = "$b64"  # {"$b64": "..."} is a bytes value in the JSON
# diskcache's value file names: 2 + 2 hex directories, 28 hex + .val (never a path from the row)
_VALUE_NAME = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val\Z")


class CorruptRow(Exception):
    """A store row SafeDisk refuses to decode (pickle mode, non-raw key, not our encoding)."""


class NonRawKey:
    """What SafeDisk.get returns for a key stored pickled (raw=0): a marker, never unpickled."""

    def __init__(self, data: bytes):
        self.data = bytes(data)

    def __repr__(self):
        return f"<pickled key, {len(self.data)} bytes, refused>"


# ---- modes and owner checks ---------------------------------------------------------------------


def dir_mode() -> int:
    """0700, or setgid 2770 with JITMARLIN_CACHE_SHARED=group."""
    return 0o2770 if cache_shared_group() else 0o700


def file_mode() -> int:
    return 0o660 if cache_shared_group() else 0o600


def make_dir(path: Path) -> None:
    """mkdir with the cache's mode set explicitly (whatever the umask); parents above the cache
    root are made as usual, existing directories are left alone (tree_problem checks them)."""
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, dir_mode())
    except FileExistsError:
        return
    os.chmod(path, dir_mode())  # mkdir's mode is masked by the umask; chmod is not


def create_file(path: Path) -> None:
    """Create `path` empty with the cache's file mode unless it exists (SQLite then gives its
    -wal/-shm files the database file's mode)."""
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, file_mode())
        try:
            os.fchmod(fd, file_mode())
        finally:
            os.close(fd)


def _my_group(gid: int) -> bool:
    return gid == os.getegid() or gid in os.getgroups()


def stat_problem(st: os.stat_result, what: str, *, owner_root_ok: bool = False) -> str | None:
    """Why a cache path with stat `st` must not be trusted, or None. Private: owned by this user,
    not writable by group or other. Shared (JITMARLIN_CACHE_SHARED=group): owned by this user or
    one of its groups, not writable by other."""
    uid = os.geteuid()
    shared = cache_shared_group()
    owner_ok = st.st_uid == uid or (owner_root_ok and st.st_uid == 0)
    if shared:
        owner_ok = owner_ok or _my_group(st.st_gid)
    if not owner_ok:
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {uid})" + (
            "" if shared else "; set JITMARLIN_CACHE_SHARED=group for a group cache"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002:
        return f"{what} is writable by other users (mode {mode:o})"
    if mode & 0o020 and not shared:
        return (
            f"{what} is group-writable (mode {mode:o}); set JITMARLIN_CACHE_SHARED=group to share a cache with a group"
        )
    return None


def tree_problem(root: Path, parts=(), *, owner_root_ok: bool = False) -> str | None:
    """Why the cache tree at `root` (and those of `parts` below it that exist) must not be
    used, or None. Symlinks below the root are refused."""
    try:
        problem = stat_problem(os.stat(root), f"cache dir {root}", owner_root_ok=owner_root_ok)
        if problem:
            return problem
        for part in parts:
            p = root / part
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                return f"{p} is a symlink"
            problem = stat_problem(st, str(p), owner_root_ok=owner_root_ok)
            if problem:
                return problem
    except OSError as exc:
        return f"cannot stat {root} ({exc})"
    return None


# ---- values --------------------------------------------------------------------------------------


def _enc(obj):
    if isinstance(obj, (bytes, bytearray)):
        return {_B64: base64.b64encode(bytes(obj)).decode("ascii")}
    raise TypeError(f"the kernel store keeps JSON and bytes only, not {type(obj).__name__}")


def _dec(d: dict):
    if len(d) == 1 and _B64 in d:
        return base64.b64decode(d[_B64], validate=True)
    return d


def encode(value) -> bytes:
    """A value as stored: MAGIC + JSON (bytes as {"$b64": ...})."""
    return MAGIC + json.dumps(value, default=_enc, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes):
    if not data.startswith(MAGIC):
        raise CorruptRow("value is not in jitmarlin's store encoding")
    try:
        return json.loads(data[len(MAGIC) :], object_hook=_dec)
    except (ValueError, TypeError) as exc:
        raise CorruptRow(f"value does not decode ({exc})") from None


def read_bounded(path: str, limit: int = MAX_VALUE_BYTES, check_owner: bool = False) -> bytes:
    """A regular file's bytes (no symlink followed, at most `limit`: a planted /dev/zero or huge
    file is refused, not read); with check_owner, refused unless stat_problem passes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptRow(f"{path} is not a regular file")
        if check_owner:
            problem = stat_problem(st, path)
            if problem:
                raise CorruptRow(problem)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CorruptRow(f"{path} is larger than {limit} bytes")
    return data


class SafeDisk(diskcache.Disk):
    """diskcache Disk storing JSON only. No code path here calls pickle: put/get take raw str
    or bytes keys, store encodes JSON, fetch decodes it and refuses every other row."""

    check_owner = True  # value files must pass stat_problem (off for the read-only tier)

    def __init__(self, directory, min_file_size=0, **_ignored):
        # (the store's Settings table passes pickle_protocol etc.: ignored, never used)
        super().__init__(directory, min_file_size=min_file_size, pickle_protocol=0)

    def put(self, key):
        if type(key) is str:
            return key, True
        if type(key) is bytes:
            return sqlite3.Binary(key), True
        raise TypeError(f"store keys are str or bytes, not {type(key).__name__}")

    def get(self, key, raw):
        if raw:
            return bytes(key) if type(key) is sqlite3.Binary else key
        return NonRawKey(key)  # a pickled key: reported by verify, never loaded

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        if read:
            raise TypeError("the kernel store does not take file objects")
        data = encode(value)
        if len(data) < self.min_file_size:
            return 0, MODE_RAW, None, sqlite3.Binary(data)
        filename, full_path = self.filename(key, value)
        self._write(full_path, [data], "xb")
        return len(data), MODE_BINARY, filename, None

    def _write(self, full_path, iterator, mode, encoding=None):
        # diskcache's version opens with the umask's mode; ours sets the cache's modes explicitly
        full_dir = Path(full_path).parent
        for attempt in range(10):
            try:
                for d in (full_dir.parent, full_dir):
                    make_dir(d)
                fd = os.open(full_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, file_mode())
                break
            except FileNotFoundError:  # another process removed the directory meanwhile
                if attempt == 9:
                    raise
        size = 0
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, file_mode())
            for chunk in iterator:
                size += len(chunk)
                f.write(chunk)
        return size

    def fetch(self, mode, filename, value, read):
        if read:
            raise CorruptRow("file-handle reads are not supported by the kernel store")
        if mode == MODE_RAW and isinstance(value, bytes):
            return decode(bytes(value))
        if mode == MODE_BINARY and isinstance(filename, str) and _VALUE_NAME.match(filename):
            try:
                data = read_bounded(os.path.join(self._directory, filename), check_owner=self.check_owner)
            except FileNotFoundError:
                raise  # (an IOError: diskcache reads it as "deleted meanwhile", a miss)
            except OSError as exc:
                raise CorruptRow(f"value file unreadable ({exc})") from None
            return decode(data)
        raise CorruptRow(f"row of mode {mode!r} refused (jitmarlin stores JSON only; a pickle row is never loaded)")

    def remove(self, file_path):
        # a planted row's filename must not make a delete remove a file outside the store
        if isinstance(file_path, str) and _VALUE_NAME.match(file_path):
            super().remove(file_path)


class ReadOnlySafeDisk(SafeDisk):
    check_owner = False  # the tier's directory was checked; its files may belong to root


# ---- locks ---------------------------------------------------------------------------------------


def _open_lock(path: Path) -> int:
    """An fd to flock `path` through, created with the cache's file mode. In a group cache the
    file may be another member's: flock needs no write access, so read-only is enough."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, file_mode())
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, file_mode())  # (the umask applied to O_CREAT's mode)
    return fd


@contextlib.contextmanager
def flock_timeout(path: Path, timeout: float | None = None):
    """Hold an exclusive flock on `path`; yields True, or False when it stayed held by another
    process for `timeout` s (default JITMARLIN_LOCK_TIMEOUT_S): a stopped holder then costs a
    waiter a compile in memory, not a hang. The holder unlinks the file before releasing it;
    a waiter that then wins the lock on the unlinked file tries again on the path's new one."""
    timeout = lock_timeout_s() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        fd = _open_lock(path)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous holder removed it: lock the current file instead
                continue
            try:
                yield True
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)  # while still holding it (see above)
            return
        finally:
            os.close(fd)  # (closing releases the flock)
