"""A FileIO that counts the files opened through it: how the health collector reports its reads."""

from __future__ import annotations

from typing import Callable

from pyiceberg.io import FileIO, InputFile, OutputFile


class CountingFileIO(FileIO):
    """Wraps a FileIO and counts every file opened for reading through it."""

    def __init__(self, inner: FileIO, on_read: Callable[[str], None]):
        super().__init__(inner.properties)
        self._inner = inner
        self._on_read = on_read

    def new_input(self, location: str) -> InputFile:
        self._on_read(location)
        return self._inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:  # pragma: no cover - health never writes
        return self._inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:  # pragma: no cover
        self._inner.delete(location)
