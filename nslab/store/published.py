"""The studies' published reference numbers, stored as data in ``nslab/published_data``
(package data, read through importlib.resources, never under ``results/``)."""
from __future__ import annotations

import json
import os
from importlib import resources
from typing import Any, Dict

from ..errors import InputError
from ..safeio import read_bytes

#: The most a study's published numbers may take (the largest shipped is a few KiB).
MAX_BYTES = 1 << 20


def load_published(study: str) -> Dict[str, Any]:
    """Load the published numbers of ``study`` (``nslab/published_data/<study>.json``);
    ``NSLAB_PUBLISHED`` points at another directory."""
    override = os.environ.get("NSLAB_PUBLISHED")
    try:
        if override:  # a regular file, no link followed, read with a bound
            return json.loads(read_bytes(os.path.join(override, f"{study}.json"), MAX_BYTES))
        return json.loads((resources.files("nslab") / "published_data" / f"{study}.json").read_text())
    except OSError as exc:
        raise InputError(f"published data for {study!r} not found: {exc}") from None
    except ValueError as exc:
        raise InputError(f"published data for {study!r}: not valid JSON: {exc}") from None
