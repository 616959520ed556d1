"""Atomic writes: complete results or nothing, never a half-written file or directory."""

from __future__ import annotations

import pytest

from hybrid.atomic import atomic_directory, atomic_file, write_text


def test_write_text_creates_parents_and_replaces(tmp_path):
    p = tmp_path / "a" / "b.txt"
    write_text(p, "one")
    write_text(p, "two")
    assert p.read_text() == "two"
    assert [x.name for x in p.parent.iterdir()] == ["b.txt"]  # no temporaries left


def test_replacing_a_file_keeps_its_mode(tmp_path):
    p = tmp_path / "private.txt"
    write_text(p, "one")
    p.chmod(0o600)
    write_text(p, "two")
    assert p.read_text() == "two" and p.stat().st_mode & 0o777 == 0o600


def test_failed_file_write_keeps_old_content_and_leaves_no_temp(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(p) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.csv"]


def test_directory_swap_and_failure(tmp_path):
    out = tmp_path / "bundle"
    with atomic_directory(out) as tmp:
        (tmp / "x").write_text("1")
    with atomic_directory(out) as tmp:
        (tmp / "y").write_text("2")
    assert sorted(x.name for x in out.iterdir()) == ["y"]
    with pytest.raises(ValueError), atomic_directory(out) as tmp:
        (tmp / "z").write_text("3")
        raise ValueError("bad")
    assert sorted(x.name for x in out.iterdir()) == ["y"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bundle"]
    with pytest.raises(ValueError), atomic_directory(tmp_path / "new") as tmp:
        raise ValueError("bad")
    assert not (tmp_path / "new").exists()


def test_links_devices_and_pipes_are_written_through_never_replaced(tmp_path):
    """``-o link.json`` replaced the symlink with a file, ``-o /dev/full`` (as root) the device node with a JSON
    file: a link's file is replaced atomically and the link kept; a device or pipe is a stream written through."""
    import os
    import stat
    import threading

    from hybrid.atomic import write_text
    from hybrid.errors import OutputPathError

    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    write_text("/dev/null", "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if os.path.exists("/dev/full"):
        with pytest.raises(OutputPathError, match="/dev/full: no space left on device"):
            write_text("/dev/full", "x")
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert not list(tmp_path.glob(".*.tmp"))
