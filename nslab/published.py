"""The studies' published reference numbers, stored as data in ``results/published``."""
from __future__ import annotations

import json
import os
from typing import Any, Dict

from .errors import InputError

#: Repository copy first; an installed copy can point elsewhere with NSLAB_PUBLISHED.
_DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "results", "published")


def published_dir() -> str:
    return os.environ.get("NSLAB_PUBLISHED", _DEFAULT)


def load_published(study: str) -> Dict[str, Any]:
    """Load ``results/published/<study>.json``."""
    path = os.path.join(published_dir(), f"{study}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as exc:
        raise InputError(f"published data for {study!r} not found at {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
