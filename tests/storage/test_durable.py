"""The one durable-write helper, and the data-directory files written through it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from databus.broker.producer_ids import FILE_NAME, ProducerIdAllocator
from databus.storage.durable import atomic_write, fsync_all
from databus.storage.meta_properties import (
    META_PROPERTIES,
    load_or_create_cluster_id,
    read_meta_properties,
)


def test_fsync_all_syncs_every_file_and_names_the_one_that_failed(tmp_path):
    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT) for name in ("a", "b")]
    bad = os.open(tmp_path / "c", os.O_RDWR | os.O_CREAT)
    os.close(bad)  # a closed descriptor: its fsync fails with EBADF
    try:
        fsync_all([(fds[0], "a"), (fds[1], "b")])
        fsync_all([])
        with pytest.raises(OSError) as failure:
            fsync_all([(fds[0], "a"), (bad, "c"), (fds[1], "b")])
        assert failure.value.filename == "c"
    finally:
        for fd in fds:
            os.close(fd)


def test_atomic_write_creates_then_replaces_leaving_no_temp_file(tmp_path):
    path = tmp_path / "file"
    atomic_write(path, b"first")
    assert path.read_bytes() == b"first"
    inode = path.stat().st_ino
    atomic_write(str(path), b"second, longer than the first")
    assert path.read_bytes() == b"second, longer than the first"
    assert path.stat().st_ino != inode, "replaced by a rename, not rewritten in place"
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_without_sync_the_replacement_is_still_atomic(tmp_path):
    path = tmp_path / "snapshot"
    atomic_write(path, b"old")
    atomic_write(path, b"new", sync=False)
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["snapshot"]


def test_a_write_failing_in_the_middle_leaves_the_old_file_and_no_temp_file(tmp_path):
    """A real failure while writing the temp file: the file-size limit (EFBIG) cuts the write
    after 4 KiB, in a child process so the limit does not reach the test runner."""
    path = tmp_path / "meta"
    atomic_write(path, b"the old contents")
    child = textwrap.dedent(f"""
        import resource, signal, sys
        from databus.storage.durable import atomic_write, fsync_all
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            atomic_write({str(path)!r}, b"x" * 100_000)
        except OSError as exc:
            print("failed:", exc.strerror)
            sys.exit(0)
        sys.exit("the write did not fail")
    """)
    done = subprocess.run([sys.executable, "-c", child], check=False, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("failed: File too large")
    assert path.read_bytes() == b"the old contents"
    assert os.listdir(tmp_path) == ["meta"], "the temp file was removed"


def test_a_failed_rename_removes_the_temp_file(tmp_path):
    target = tmp_path / "dir"
    (target / "inside").mkdir(parents=True)  # a non-empty directory cannot be replaced
    with pytest.raises(OSError):
        atomic_write(target, b"data")
    assert sorted(os.listdir(tmp_path)) == ["dir"]


def test_meta_properties_is_written_once_in_kafkas_format(tmp_path):
    cluster_id = load_or_create_cluster_id(tmp_path, 7)
    assert len(cluster_id) == 22
    assert read_meta_properties(tmp_path) == {
        "version": "1", "cluster.id": cluster_id, "node.id": "7"}
    assert load_or_create_cluster_id(tmp_path, 7) == cluster_id
    assert sorted(os.listdir(tmp_path)) == [META_PROPERTIES]


def test_producer_ids_resume_after_the_reserved_block(tmp_path):
    allocator = ProducerIdAllocator(tmp_path, block_size=10)
    assert not (tmp_path / FILE_NAME).exists(), "building the allocator touches no file"
    assert [allocator.next_id() for _ in range(12)] == list(range(12))
    assert (tmp_path / FILE_NAME).read_text() == "20\n"
    # a restart (or a crash) resumes past everything the old process may have handed out
    assert ProducerIdAllocator(tmp_path, block_size=10).next_id() == 20
    assert sorted(os.listdir(tmp_path)) == [FILE_NAME]
