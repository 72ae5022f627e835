"""`dedup relink` attacked where the other relink tests do not look: a relink interrupted half-way through its
writes, documents the figure check kept apart or sent to review, a group at `group_cap`, and sequences of a
person's actions followed by their inverse. Each test failed on the code before its fix.

The semantic cases are built on the toy world of tests/test_relink.py (chosen vectors, real runner, real SQLite
state); the SimHash cases on a cheap-stage world of real texts (the figure check's market reports).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from streams.core.relink import Label
from streams.vectors.edge import EdgeVectorStore
from tests.test_relink import VECTORS, ToyEmbedder, World, _settings, assert_stars, dump


@pytest.fixture
def world(tmp_path: Path) -> World:
    from tests.test_relink import DAY_ONE

    world = World(tmp_path, tmp_path / "out", tmp_path / "out" / "state", _settings(), ToyEmbedder(VECTORS))
    world.run(DAY_ONE, "out")
    return world


def _label(a: str, b: str, duplicate: bool) -> Label:
    return Label(a, b, duplicate, "carol")


# ---------------------------------------------------------------- interrupted half-way, then run again


def test_a_relink_interrupted_inside_its_state_writes_is_completed_by_running_it_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or a failing vector write) lands while the relink writes the state: A's group share was taken
    from B, its keys re-pointed and its bands registered, its verdict not yet replaced. The `finally` closing
    the state committed that half, so running the relink again took A from B's group a second time."""
    clean = World(world.folder / "clean", world.folder / "clean" / "out", world.folder / "clean" / "out" / "state",
                  world.settings, world.embedder)  # fmt: skip
    shutil.copytree(world.out, clean.out)
    clean.relink(decisions=[_label("A", "B", False)])
    expected = dump(clean.state)

    def interrupted(self: EdgeVectorStore, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(EdgeVectorStore, "add", interrupted)
        with pytest.raises(KeyboardInterrupt):
            world.relink(decisions=[_label("A", "B", False)])
    world.relink(decisions=[_label("A", "B", False)])
    assert_stars(world.state)
    assert dump(world.state) == expected
