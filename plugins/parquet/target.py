"""Where the files go: a local directory (written with fsync), or any pyarrow / fsspec
filesystem URL (``s3://bucket/prefix``, ``hdfs://...``, ``memory://...``; only local is
tested here).  Blocking calls: the sink runs them in a worker thread."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from databus.storage.durable import atomic_writer

from . import layout


class Target:
    def __init__(self, url: str) -> None:
        self.url = url
        self.local = "://" not in url or url.startswith("file://")
        if self.local:
            self.fs = None
            self.root = os.path.abspath(url.removeprefix("file://"))
        else:
            self.fs, self.root = _filesystem(url)

    def join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def write(self, table: pa.Table, directory: str, name: str, codec: str) -> str:
        """Write ``table`` as ``directory/name``: a hidden temporary file first, then a
        rename, so a reader never sees half a file (local: fsync'd before and after)."""
        folder = self.join(directory)
        final = f"{folder}/{name}"
        temporary = f"{folder}/{layout.temp_name(name, uuid.uuid4().hex[:12])}"
        compression = None if codec == "none" else codec
        if self.local:
            os.makedirs(folder, exist_ok=True)
            with atomic_writer(final, temporary=temporary) as f:
                pq.write_table(table, f, compression=compression)
        else:
            self.fs.create_dir(folder, recursive=True)
            pq.write_table(table, temporary, compression=compression, filesystem=self.fs)
            self.fs.move(temporary, final)
        return final

    def files_under(self, directory: str) -> list[str]:
        """Every file below ``directory`` (full paths), [] if it does not exist."""
        top = self.join(directory)
        if self.local:
            out = []
            for folder, _dirs, names in os.walk(top):
                out.extend(f"{folder}/{n}" for n in names)
            return out
        from pyarrow import fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(top, recursive=True, allow_not_found=True))
        return [i.path for i in infos if i.type == pafs.FileType.File]

    def delete(self, path: str) -> None:
        if self.local:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        else:
            self.fs.delete_file(path)


def _filesystem(url: str):
    from pyarrow import fs as pafs

    try:
        return pafs.FileSystem.from_uri(url)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        pass
    try:
        import fsspec
    except ImportError:
        raise ValueError(f"parquet: pyarrow cannot open {url!r} and fsspec is not "
                         "installed") from None
    fs, root = fsspec.core.url_to_fs(url)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), root
