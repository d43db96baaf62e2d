"""The packet generator and sink (``nslab-pktgen``, C, built by ``make setup``)."""
from __future__ import annotations

import os
import shutil
import sys

from .errors import CapabilityError


def pktgen_path() -> str:
    """The generator built by setup, next to this Python (or on PATH)."""
    cand = os.path.join(os.path.dirname(sys.executable), "nslab-pktgen")
    if os.path.exists(cand):
        return cand
    found = shutil.which("nslab-pktgen")
    if found:
        return found
    raise CapabilityError("the packet generator nslab-pktgen is not built: run `make setup` "
                          "(needs gcc)")
