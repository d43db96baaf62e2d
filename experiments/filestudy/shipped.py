"""The study files shipped with nslab (``studies/`` at the top of the
repository), registered like the built-in studies."""
from __future__ import annotations

import os

from .study import study_class

STUDIES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "studies")

EcmpFailover = study_class(os.path.join(STUDIES, "ecmp-failover.yaml"))
