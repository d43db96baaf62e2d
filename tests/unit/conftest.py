"""The unit tier turns deprecation warnings into errors, so the next break of a
Python, a dependency or a standard-library API is seen here first (Python 3.11
on Debian 12, 3.13 on Debian 13), not when a user upgrades."""
import pytest

DEPRECATIONS = ("error::DeprecationWarning", "error::PendingDeprecationWarning")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/unit/" in str(item.fspath).replace("\\", "/"):
            for spec in DEPRECATIONS:
                item.add_marker(pytest.mark.filterwarnings(spec))
