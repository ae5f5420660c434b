"""Storage locations, normalised: one type, :class:`StorageLocation`, and two constructors.

- :func:`parse_location`, **strict**, for what a policy writes (untrusted: core/policies/envelope.py checks every
  location an operation uses against its table's): the scheme in lower case, ``s3a`` and ``s3n`` as
  ``s3`` (Iceberg's own ``equal_schemes`` default, not the policy's ``equalSchemes``, which an attacker
  could write), ``file:/p``, ``file:///p``, ``file://localhost/p`` and a bare ``/p`` as one form, the
  authority (bucket, host) in lower case, empty and ``.`` segments dropped, ``..`` applied (refused
  above the root). A percent-encoded dot segment or separator (``%2e%2e``, ``%2f``), a backslash, a
  control character and ``//host`` without a scheme are refused rather than guessed at. Relative
  locations (``data``) are folders of the table's location (:func:`is_relative`,
  :func:`relative_segments`), spelled from the table's own (:func:`joined`).
- :func:`store_location`, **lenient**, for what Iceberg and the file systems write (a table's location,
  the files a listing returns; core/storage/quarantine.py, iceberg/file_store.py): the same schemes, the path
  resolved as POSIX does (``..`` stops at the root), the authority as written.

Either way a location is compared path component by path component, never by text (``/t/orders2`` is
not inside ``/t/orders``), and :meth:`StorageLocation.relative_text` cuts a clean listed path by its
prefix without a parse (an orphan cleanup relocates 100,000 of them). Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable
from urllib.parse import unquote

# Iceberg's DeleteOrphanFilesSparkAction.EQUAL_SCHEMES_DEFAULT ("s3n,s3a" → "s3"), as the table's files compare.
EQUAL_SCHEMES = {"s3a": "s3", "s3n": "s3"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.DOTALL)
# The lenient constructor's, as it always was: without DOTALL, a name holding a line break is no URI.
_LISTED_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$")
_LOCAL_HOSTS = ("", "localhost")
_UNCLEAN = re.compile(r"//|/\.\.?/")  # a doubled slash, /./ or /../ in a path


@dataclass(frozen=True)
class StorageLocation:
    """A file or folder location, normalised: scheme (lower case, ``s3a``/``s3n`` as ``s3``, ``file`` for
    a bare path), authority (a bucket or host; ``""`` for none) and an absolute path without ``.``,
    ``..``, doubled or trailing slashes. ``file:/x``, ``file:///x`` and ``/x`` are the same location."""

    scheme: str
    authority: str
    path: str

    @property
    def segments(self) -> tuple[str, ...]:
        """The path's folders and name (``()`` for the root)."""
        return tuple(self.path.split("/")[1:]) if self.path != "/" else ()

    @property
    def uri(self) -> str:
        """As Iceberg's listing spells it: ``file:/x`` for local files, ``s3://bucket/key`` otherwise."""
        if self.scheme == "file" and not self.authority:
            return f"file:{self.path}"
        return f"{self.scheme}://{self.authority}{self.path}"

    def contains(self, other: StorageLocation) -> bool:
        """Whether ``other`` is this location or lies below it (component by component, never by text)."""
        if (self.scheme, self.authority) != (other.scheme, other.authority):
            return False
        return other.path == self.path or other.path.startswith(self.path.rstrip("/") + "/")

    def relative(self, other: StorageLocation) -> str | None:
        """``other``'s path below this location (None: not strictly below it)."""
        if other.path == self.path or not self.contains(other):
            return None
        return other.path[len(self.path.rstrip("/")) + 1:]

    def ancestors(self) -> list[StorageLocation]:
        """The folders above this location, nearest first, up to the root."""
        parts = self.segments
        return [StorageLocation(self.scheme, self.authority, "/" + "/".join(parts[:n]))
                for n in range(len(parts) - 1, -1, -1)]

    def child(self, *parts: str) -> StorageLocation:
        return StorageLocation(self.scheme, self.authority, posixpath.join(self.path, *parts))

    @cached_property
    def _spellings(self) -> tuple[str, ...]:
        """Prefixes (ending in ``/``) that spell a path below this location as listings write it."""
        base = self.path.rstrip("/")
        if self.scheme == "file" and not self.authority:
            return f"file:{base}/", f"file://{base}/", f"{base}/"
        return (f"{self.scheme}://{self.authority}{base}/",)

    def relative_text(self, text: str) -> str | None:
        """:meth:`relative` of a location given as text: a clean path under one of this location's
        spellings is cut by its prefix (no parse: a cleanup relocates 100,000 of them), anything else
        is parsed (:func:`store_location`)."""
        for prefix in self._spellings:
            if text.startswith(prefix):
                rest = text[len(prefix):]
                if rest and not _UNCLEAN.search(f"/{rest}/"):
                    return rest
                break
        return self.relative(store_location(text))


# -- strict: a policy's locations ------------------------------------------------------------------------------


def is_relative(text: str) -> bool:
    """A location without a scheme that does not start with ``/``: a folder of the table's location."""
    text = text.strip()
    return not _SCHEME.match(text) and not text.startswith(("/", "\\"))


def parse_location(text: str) -> StorageLocation:
    """The strict constructor, for a location a policy gives (untrusted): an absolute location normalised
    (see the module); ValueError saying what is wrong."""
    text = text.strip()
    match = _SCHEME.match(text)
    scheme, rest = (match.group(1).lower(), match.group(2)) if match else ("file", text)
    if not rest.startswith("/"):
        raise ValueError(f"{text!r} is neither a folder of the table's location (relative, such as 'data') nor an "
                         "absolute location (a scheme such as s3:// or file:/, or a path starting with '/')")
    authority = ""
    if rest.startswith("//"):
        if not match:  # '//host/path' without a scheme: Hadoop would read a host there
            raise ValueError(f"{text!r} starts with '//': give the scheme (file:/, s3://...) or a single '/'")
        authority, _, path = rest[2:].partition("/")
        rest = "/" + path
    authority = authority.lower()
    if scheme == "file" and authority in _LOCAL_HOSTS:
        authority = ""
    segments = _segments(rest, text, absolute=True)
    return StorageLocation(EQUAL_SCHEMES.get(scheme, scheme), authority, "/" + "/".join(segments))


def relative_segments(text: str) -> tuple[str, ...]:
    """A relative location's folders below the table's location (``data/./x/`` → ``("data", "x")``);
    ValueError when ``..`` climbs out of it."""
    return _segments(text.strip(), text, absolute=False)


def _segments(path: str, text: str, absolute: bool) -> tuple[str, ...]:
    if any(ord(ch) < 32 or ch == "\x7f" for ch in path):
        raise ValueError(f"{text!r} contains a control character")
    if "\\" in path:
        raise ValueError(f"{text!r} contains a backslash: write folders with '/'")
    kept: list[str] = []
    for segment in path.split("/"):
        decoded = unquote(segment)
        if decoded != segment and (decoded in (".", "..") or "/" in decoded or "\\" in decoded):
            raise ValueError(f"{text!r} hides '{decoded}' as {segment!r} (percent-encoded): write the folder names "
                             "as they are")
        if segment in ("", "."):
            continue
        if segment == "..":
            if not kept:
                where = "the root" if absolute else "the table's location"
                raise ValueError(f"{text!r} climbs above {where} with '..'")
            kept.pop()
            continue
        kept.append(segment)
    return tuple(kept)


def joined(table_location: str, segments: Iterable[str]) -> str:
    """The table location as the catalog spelled it, with ``segments`` below it: the one form floe hands
    the engine, so that what Iceberg lists is what was checked."""
    base = table_location.strip()
    while base.endswith("/") and not base.endswith(":/") and not base.endswith("//"):
        base = base[:-1]
    tail = "/".join(segments)
    if not tail:
        return base
    return base + tail if base.endswith("/") else f"{base}/{tail}"


# -- lenient: locations Iceberg and the file systems wrote ---------------------------------------------


def store_location(uri: str) -> StorageLocation:
    """The lenient constructor, for a location Iceberg or the file system wrote (the table's, a listed
    file's): ``.``, ``..`` and doubled slashes resolved as a path, the authority kept as written;
    ValueError for one that is empty or not absolute."""
    text = (uri or "").strip()
    scheme, authority, path = "file", "", text
    found = _LISTED_SCHEME.match(text)
    if found:
        scheme, rest = found.group(1).lower(), found.group(2)
        if rest.startswith("//"):
            authority, _, path = rest[2:].partition("/")
            path = "/" + path
        else:
            path = rest
    if not path.startswith("/"):
        raise ValueError(f"{uri!r} is not an absolute location (a URI such as s3://bucket/prefix, or an absolute path)")
    normal = posixpath.normpath(path)
    normal = "/" + normal.lstrip("/")  # normpath keeps a leading '//'
    return StorageLocation(EQUAL_SCHEMES.get(scheme, scheme), authority, normal)
