"""Find the folders that ship beside the package (`templates/`, `sample_logs/`).

They live at the repository root, not inside `forensics/`, so that users read and edit
them as plain files; an editable install (`pip install -e .`) keeps them reachable.
"""

from __future__ import annotations

from pathlib import Path

import forensics
from forensics.errors import ForensicsError

PACKAGE_ROOT = Path(forensics.__file__).resolve().parent.parent


class MissingFolderError(ForensicsError):
    """A folder that should sit next to the package is not there."""


def repo_folder(name: str, root: Path = PACKAGE_ROOT) -> Path:
    """`root/name`, or an error that says where it was looked for and how to get it."""
    path = root / name
    if not path.is_dir():
        raise MissingFolderError(
            f'cannot find the "{name}/" folder: looked in {path}; forensics reads it from '
            "its source tree, so install it with `pip install -e .` from a checkout"
        )
    return path


def templates_dir() -> Path:
    return repo_folder("templates")


def sample_logs_dir() -> Path:
    return repo_folder("sample_logs")
