"""Files of a table's store from the Dagster process: stat, list, move, delete, for orphan quarantine.

Spark Connect gives the driver no JVM, so floe cannot reach Hadoop's FileSystem or Iceberg's FileIO
there; what every deployment does have is PyIceberg, which floe already uses to read each table's
metadata. This wraps the pyarrow file systems of PyIceberg's ``PyArrowFileIO``, built from the
table's FileIO properties (the catalog's, plus credentials a REST catalog vends, never the table's own:
iceberg/table_io.py builds them): local and HDFS
files, S3 (and S3-compatible servers), GCS and Azure, with the same credentials the metadata reads use.

Locations in and out are URIs as Iceberg's listing spells them (``file:/x``, ``s3://bucket/key``):
:func:`~floe_dagster.core.storage.locations.store_location` normalises them. Object stores have no rename:
a move there is a copy and a delete, so moves and stats of remote files run on a thread pool
(pyarrow releases the GIL); local ones run in this thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Mapping

from pyarrow import fs as pafs

from floe_dagster.core.storage.locations import StorageLocation, store_location

_LOCAL = ("file",)
_PATH_ONLY = ("file", "hdfs", "viewfs")  # pyarrow's path has no authority for these
_LIST_PARENT_AT = 32  # this many stats under one folder of an object store: one listing instead


@dataclass(frozen=True)
class FileFacts:
    location: str  # as :class:`StorageLocation.uri` spells it
    size: int
    modified: datetime | None  # UTC; None: the store did not say (such a file is young: core/storage/quarantine.is_old)


class FileStore:
    """One table's store (any number of buckets or folders, one set of credentials)."""

    def __init__(self, io_properties: Mapping[str, str] | None = None, workers: int = 16):
        # Imported here: PyIceberg's PyArrow IO brings pyarrow.dataset and pandas (0.4 s of CPU), which the code
        # location's load (every `definitions validate`, every run's import) otherwise pays without a store.
        from pyiceberg.io.pyarrow import PyArrowFileIO

        self._io = PyArrowFileIO(properties=dict(io_properties or {}))
        self.workers = workers
        self._made: set[str] = set()  # local folders known to exist

    # -- addressing ---------------------------------------------------------------------------------
    def _resolve(self, location: str | StorageLocation) -> tuple[pafs.FileSystem, str, StorageLocation]:
        where = location if isinstance(location, StorageLocation) else store_location(location)
        path = where.path if where.scheme in _PATH_ONLY else f"{where.authority}{where.path}"
        return self._io.fs_by_scheme(where.scheme, where.authority or None), path, where

    @staticmethod
    def _uri(where: StorageLocation, path: str) -> str:
        if where.scheme in _PATH_ONLY:
            return StorageLocation(where.scheme, where.authority, path).uri
        authority, _, rest = path.partition("/")
        return StorageLocation(where.scheme, authority, "/" + rest).uri

    def _pool_map(self, where: StorageLocation, work, items: list) -> list:
        if where.scheme in _LOCAL or len(items) < 2:
            return [work(item) for item in items]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(work, items))

    # -- reading ------------------------------------------------------------------------------------
    def facts(self, locations: Iterable[str]) -> dict[str, FileFacts]:
        """Size and modification time of each file that exists, by its location as given (a location
        that is missing or not a file is left out)."""
        wanted = list(dict.fromkeys(locations))
        if not wanted:
            return {}
        found: dict[str, FileFacts] = {}
        by_parent: dict[tuple[str, str, str], list[str]] = {}
        for location in wanted:
            local = local_path(location)
            if local is not None:  # os.stat: no parse, no pyarrow object per file
                facts = _local_facts(location, local)
                if facts is not None:
                    found[location] = facts
                continue
            where = store_location(location)
            parent = where.path.rsplit("/", 1)[0] or "/"
            by_parent.setdefault((where.scheme, where.authority, parent), []).append(location)
        for (scheme, authority, parent), group in by_parent.items():
            folder = StorageLocation(scheme, authority, parent)
            if scheme not in _LOCAL and len(group) >= _LIST_PARENT_AT:
                listed = {store_location(f.location): f for f in self._listing(folder, recursive=False)}
                found.update({loc: listed[store_location(loc)] for loc in group if store_location(loc) in listed})
            else:
                found.update(self._stat(folder, group))
        return found

    def _stat(self, folder: StorageLocation, group: list[str]) -> dict[str, FileFacts]:
        filesystem = self._resolve(folder)[0]
        paths = [self._resolve(loc)[1] for loc in group]
        if folder.scheme in _LOCAL:
            infos = filesystem.get_file_info(paths)
        else:
            infos = self._pool_map(folder, filesystem.get_file_info, paths)
        return {loc: _facts(loc, info) for loc, info in zip(group, infos) if info.type == pafs.FileType.File}

    def _listing(self, folder: StorageLocation, recursive: bool) -> list[FileFacts]:
        if folder.scheme in _LOCAL:
            return _local_listing(folder, recursive)
        filesystem, path, where = self._resolve(folder)
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=recursive)
        return [_facts(self._uri(where, info.path), info) for info in filesystem.get_file_info(selector)
                if info.type == pafs.FileType.File]

    def files_under(self, folder: str | StorageLocation) -> list[FileFacts]:
        """Every file below ``folder`` (none when it does not exist)."""
        return self._listing(folder if isinstance(folder, StorageLocation) else store_location(folder), recursive=True)

    def folders_in(self, folder: str | StorageLocation) -> list[str]:
        """The names of ``folder``'s direct subfolders (on an object store: its common prefixes; locally
        a symbolic link is none: it is never followed)."""
        filesystem, path, where = self._resolve(folder)
        if where.scheme in _LOCAL:
            return sorted(entry.name for entry in _local_entries(path) if entry.is_dir(follow_symlinks=False))
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        return sorted(info.base_name for info in filesystem.get_file_info(selector)
                      if info.type == pafs.FileType.Directory)

    def exists(self, location: str | StorageLocation) -> bool:
        filesystem, path, _ = self._resolve(location)
        return filesystem.get_file_info(path).type != pafs.FileType.NotFound

    def read_text(self, location: str | StorageLocation) -> str | None:
        filesystem, path, _ = self._resolve(location)
        try:
            with filesystem.open_input_stream(path) as stream:
                return stream.read().decode()
        except FileNotFoundError:
            return None

    # -- writing ------------------------------------------------------------------------------------
    def write_text(self, location: str | StorageLocation, text: str) -> None:
        filesystem, path, where = self._resolve(location)
        self._make_parent(filesystem, path, where)
        with filesystem.open_output_stream(path) as stream:
            stream.write(text.encode())

    def move_many(self, pairs: list[tuple[str, str]]) -> list[str | None]:
        """Move each (source, target), never over an existing target; per pair None, or why it was
        not moved (the target exists, the source is gone, the store refused)."""
        if not pairs:
            return []
        local = [(local_path(source), local_path(target)) for source, target in pairs]
        if all(source and target for source, target in local):  # a loop of link and unlink
            return [self._local_move_one(source, target) for source, target in local]
        return self._pool_map(store_location(pairs[0][0]), lambda pair: self._move_one(*pair), pairs)

    def _local_move_one(self, source: str, target: str) -> str | None:
        parent = target.rsplit("/", 1)[0]
        try:
            if parent not in self._made:
                os.makedirs(parent, exist_ok=True)
                self._made.add(parent)
            _local_move(source, target)
        except FileExistsError:
            return f"file:{target} exists: not overwritten"
        except FileNotFoundError:
            return f"file:{source} is gone"
        except OSError as exc:
            return f"file:{source}: {exc}"
        return None

    def _move_one(self, source: str, target: str) -> str | None:
        try:
            self.move(source, target)
        except FileExistsError:
            return f"{target} exists: not overwritten"
        except FileNotFoundError:
            return f"{source} is gone"
        except OSError as exc:
            return f"{source}: {exc}"
        return None

    def move(self, source: str, target: str) -> None:
        """Move one file; FileExistsError when ``target`` exists (locally refused atomically: a hard
        link never replaces, then the source is unlinked)."""
        source_fs, source_path, source_where = self._resolve(source)
        target_fs, target_path, target_where = self._resolve(target)
        self._make_parent(target_fs, target_path, target_where)
        if source_where.scheme in _LOCAL and target_where.scheme in _LOCAL:
            _local_move(source_path, target_path)
            return
        if target_fs.get_file_info(target_path).type != pafs.FileType.NotFound:
            raise FileExistsError(errno.EEXIST, "target exists", target)
        if (source_where.scheme, source_where.authority) == (target_where.scheme, target_where.authority):
            source_fs.move(source_path, target_path)  # S3: CopyObject, then DeleteObject
        else:
            pafs.copy_files(source_path, target_path, source_filesystem=source_fs, destination_filesystem=target_fs)
            source_fs.delete_file(source_path)

    def delete_folder(self, folder: str | StorageLocation) -> None:
        """``folder`` and everything below it (nothing when it does not exist). Locally a symbolic link
        below it (or at it) is neither followed nor deleted: it stays, with the folders that hold it."""
        filesystem, path, where = self._resolve(folder)
        if where.scheme in _LOCAL:
            _local_delete_tree(path)
        elif filesystem.get_file_info(path).type != pafs.FileType.NotFound:
            filesystem.delete_dir(path)

    def remove_empty_folders(self, folder: str | StorageLocation) -> None:
        """Local folders left empty below (and at) ``folder`` after its files moved away (object
        stores have no folders to leave behind)."""
        filesystem, path, where = self._resolve(folder)
        if where.scheme not in _LOCAL or not os.path.isdir(path):
            return
        for current, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(current)
            except OSError:  # not empty: it still holds something
                pass

    @staticmethod
    def through_link(location: str, base: StorageLocation, checked: dict[str, bool] | None = None) -> bool:
        """Whether a local ``location`` at or below ``base`` is, or lies under, a symbolic link at or below
        ``base`` (False for other stores, which have no links): such a path reaches outside the table.
        ``checked``: the folders already looked at, by path (a listing's files share their folders)."""
        where = store_location(location)
        if where.scheme not in _LOCAL or not (where == base or base.contains(where)):
            return False
        seen = {} if checked is None else checked
        current, parts = base.path.rstrip("/"), (base.relative(where) or "").split("/")
        for part in [""] + [p for p in parts if p]:
            current = f"{current}/{part}" if part else current
            if current not in seen:
                seen[current] = os.path.islink(current)
            if seen[current]:
                return True
        return False

    def _make_parent(self, filesystem: pafs.FileSystem, path: str, where: StorageLocation) -> None:
        parent = path.rsplit("/", 1)[0]
        if where.scheme not in _LOCAL or parent in self._made:
            return
        filesystem.create_dir(parent, recursive=True)
        self._made.add(parent)


def local_path(location: str) -> str | None:
    """A clean local file's path from its location (``file:/x``, ``file:///x``, ``/x``), without a
    parse; None for anything else (another scheme, an authority, ``..``: those take the long way)."""
    if location.startswith("file:"):
        rest = location[5:]
        if rest.startswith("//"):
            if not rest.startswith("///"):
                return None
            rest = rest[2:]
    else:
        rest = location
    if not rest.startswith("/") or "//" in rest or "/./" in rest or "/../" in rest or rest.endswith(("/.", "/..")):
        return None
    return rest


def _local_facts(location: str, path: str) -> FileFacts | None:
    try:
        found = os.lstat(path)  # a symbolic link is no file of the table's: never followed
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    return FileFacts(location, found.st_size, datetime.fromtimestamp(found.st_mtime, timezone.utc))


def _facts(location: str, info: pafs.FileInfo) -> FileFacts:
    modified = info.mtime
    if modified is not None and modified.tzinfo is None:
        modified = modified.replace(tzinfo=timezone.utc)
    return FileFacts(location, int(info.size or 0), modified)  # None stays None: an unknown time is no age


def _local_entries(path: str) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _local_listing(folder: StorageLocation, recursive: bool) -> list[FileFacts]:
    """The regular files below a local folder, never through a symbolic link (nor the link itself)."""
    found, pending = [], [folder.path]
    if os.path.islink(folder.path):
        return []
    while pending:
        for entry in _local_entries(pending.pop()):
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if recursive:
                    pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                facts = _local_facts(StorageLocation("file", "", entry.path).uri, entry.path)
                if facts is not None:
                    found.append(facts)
    return found


def _local_delete_tree(path: str) -> None:
    """Delete a local folder's files and then its emptied folders, bottom up; a symbolic link is left
    where it is (never followed), and so are the folders that hold one."""
    if os.path.islink(path) or not os.path.isdir(path):
        return
    for current, folders, files in os.walk(path, topdown=False, followlinks=False):
        for name in files:
            if not os.path.islink(os.path.join(current, name)):
                os.unlink(os.path.join(current, name))
        try:
            os.rmdir(current)
        except OSError:  # it still holds a link: left
            pass


def _local_move(source: str, target: str) -> None:
    try:
        os.link(source, target)  # FileExistsError: never replaces the target
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        if os.path.lexists(target):  # another file system, or no hard links there: copy, then delete
            raise FileExistsError(errno.EEXIST, "target exists", target) from exc
        shutil.copy2(source, target)
    os.unlink(source)
