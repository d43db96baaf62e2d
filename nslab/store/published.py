"""The studies' published reference numbers, stored as data in ``nslab/published_data``
(package data, read through importlib.resources, never under ``results/``)."""
from __future__ import annotations

import json
import os
from importlib import resources
from typing import Any, Dict

from ..errors import InputError


def load_published(study: str) -> Dict[str, Any]:
    """Load the published numbers of ``study`` (``nslab/published_data/<study>.json``);
    ``NSLAB_PUBLISHED`` points at another directory."""
    override = os.environ.get("NSLAB_PUBLISHED")
    try:
        if override:
            with open(os.path.join(override, f"{study}.json")) as f:
                return json.load(f)
        return json.loads((resources.files("nslab") / "published_data" / f"{study}.json").read_text())
    except (OSError, FileNotFoundError) as exc:
        raise InputError(f"published data for {study!r} not found: {exc}") from None
    except ValueError as exc:
        raise InputError(f"published data for {study!r}: not valid JSON: {exc}") from None
