"""The test sets of a trained model folder's config, as ``attnmt evaluate`` reads them: the
held-out sets checked against their draw, and every file a set names kept inside the folder."""

from __future__ import annotations

from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inside_folder
from attnmt.data import splits


def config_test_sets(model, trust: bool = False) -> dict:
    """The test sets of a model folder's config (data.test: name -> files), as ``attnmt evaluate``
    reads them. The held-out sets must be those drawn (attnmt.data.splits: never trained on). The
    config of a model folder from someone else could name any file (``/etc/passwd``, ``~/.ssh/...``),
    so every file a set names (``model.files_of_test_set``: a speech test set's sound files too)
    must lie inside the folder, symbolic links followed, unless ``trust`` (a folder the user trained: its test sets
    normally lie beside it). AttnmtError naming the set and the file otherwise."""
    splits.check_held_out(model.config, model.folder)
    sets = model.test_sets
    if trust:
        return sets
    for name, files in sets.items():
        for path in model.files_of_test_set(files):
            _inside_model(model.folder, name, path)
    return sets


def _inside_model(folder: Path, name: str, path: Path):
    try:
        inside_folder(folder, path)
    except AttnmtError as error:
        raise AttnmtError(
            f"{folder / 'config.yaml'}: test set {name} names {path}, outside the model folder or not "
            f"a file of it ({error}): a model folder cannot make attnmt read other files. Give the set "
            "yourself (--tsv FILE, or --src and --ref), or pass --trust-config if you trained this folder"
        ) from None
