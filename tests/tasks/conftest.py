"""Fixtures for the host-side fine-tuning tests (the `tokenizer` fixture is in tests/conftest.py)."""
import pathlib

import pytest

TESTDATA = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "tasks"


@pytest.fixture(scope="session")
def testdata():
  return TESTDATA
