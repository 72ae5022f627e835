"""Shared fixtures: the public data in ../shared/data and small helpers to build records."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.evaluation.corpus import NtrexDocument, data_dir, ntrex_documents


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return data_dir()


@pytest.fixture(scope="session")
def ntrex(shared_data: Path) -> list[NtrexDocument]:
    return ntrex_documents(shared_data)
