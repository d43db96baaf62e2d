import os
import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs root (network namespaces)")
    for item in items:
        if "integration" in str(item.fspath) or "smoke" in str(item.fspath):
            if os.geteuid() != 0:
                item.add_marker(skip)


def needs(*tools):
    missing = [t for t in tools if not shutil.which(t)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")
