"""``private_files``: what it creates, and what it refuses to use (issue 22)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from oma_bridge.private_files import (
    NotPrivateError,
    make_private_folder,
    open_checked,
    open_private,
)

as_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
NOBODY = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_under_umask_000_every_level_made_is_0700_and_the_file_0600(tmp_path: Path) -> None:
    # In a child: the umask is the whole process's.
    code = (
        "import os, sys; from pathlib import Path;"
        "from oma_bridge.private_files import make_private_folder, open_private;"
        "os.umask(0); root = Path(sys.argv[1]);"
        "make_private_folder(root / 'a' / 'b' / 'c');"
        "os.close(open_private(root / 'a' / 'b' / 'c' / 'f'))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=30)
    a = tmp_path / "a"
    assert [mode(p) for p in (a, a / "b", a / "b" / "c")] == [0o700] * 3
    assert mode(a / "b" / "c" / "f") == 0o600


def test_an_existing_folder_others_can_reach_is_refused_with_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    folder.chmod(0o750)
    with pytest.raises(NotPrivateError) as caught:
        make_private_folder(folder)
    assert str(caught.value) == f"{folder} has mode 0750; it must be 0700: chmod 700 {folder}"
    assert mode(folder) == 0o750  # refused, not changed
    make_private_folder(folder, forbidden=0)  # a folder the user named keeps its mode
    make_private_folder(folder, forbidden=None)


def test_a_file_where_a_folder_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    with pytest.raises(NotPrivateError, match=r"state is not a folder$"):
        make_private_folder(tmp_path / "state")


@as_root
def test_another_users_folder_or_link_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(NotPrivateError) as caught:
        make_private_folder(theirs, forbidden=0)
    assert str(caught.value) == f"{theirs} belongs to another user (uid {NOBODY})"
    # A link of another user to a folder of ours: it could be pointed elsewhere later.
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(ours)
    make_private_folder(link)  # our own link is followed
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(
        NotPrivateError, match=rf"link is a symbolic link of another user \(uid {NOBODY}\)"
    ):
        make_private_folder(link)


def test_open_checked_reads_only_a_regular_private_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    os.close(open_private(secret, os.O_WRONLY))
    os.close(open_checked(secret))
    secret.chmod(0o640)
    with pytest.raises(NotPrivateError, match=r"has mode 0640; it must be 0600$"):
        open_checked(secret)
    os.close(open_checked(secret, forbidden=0o022))  # readable, not writable, by others
    secret.chmod(0o660)
    with pytest.raises(NotPrivateError, match="has mode 0660"):
        open_checked(secret, forbidden=0o022)
    link = tmp_path / "link"
    link.symlink_to(secret)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_checked(link)  # never followed
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(NotPrivateError, match=r"fifo is not a regular file$"):
        open_checked(fifo)  # and it does not hang on one


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("old\n")
    path.chmod(0o640)
    os.close(open_private(path))
    assert mode(path) == 0o640  # its folder is what keeps others out
