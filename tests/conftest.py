import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def manifest_file(tmp_path):
    """Write dedented YAML to a file and return its path (as str)."""

    def write(text: str, name: str = "m.yaml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write
