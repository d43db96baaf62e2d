import os

import pytest

pytest_plugins = ["nslab.testing"]

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ROOT = os.path.dirname(HERE)


def data(*parts: str) -> str:
    return os.path.join(DATA, *parts)


@pytest.fixture
def nslab_cli(tmp_path):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from nslab.cli import main

    def _run(*args, capsys=None):
        return main(["--results", str(tmp_path / "results"), *args])
    return _run
