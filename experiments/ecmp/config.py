"""The ECMP study's configuration: every option of ``nslab run ecmp``, typed,
with its presets defined once."""
from __future__ import annotations

from typing import ClassVar, Dict

from pydantic import Field, StrictBool
from typing_extensions import Annotated

from nslab.model.fields import RateText, UniqueList
from nslab.run.study import StudyConfig


class EcmpConfig(StudyConfig):
    """L3 vs L4 hashing over a BGP-unnumbered clos."""

    policies: UniqueList[Annotated[int, Field(ge=0, le=3)]] = Field(
        default_factory=lambda: [0, 1],
        description="fib_multipath_hash_policy values (0 L3, 1 L4, 2 L3 inner, 3 custom)")
    trials: Annotated[int, Field(ge=1, le=1000)] = Field(10, description="trials per policy")
    streams: Annotated[int, Field(ge=1, le=64)] = Field(3, description="iperf -P streams")
    duration: Annotated[float, Field(ge=2, le=3600)] = Field(10.0, description="seconds per trial")
    spines: Annotated[int, Field(ge=1, le=16)] = Field(2, description="spines (ECMP next hops)")
    link_rate: RateText = Field("1Gbit", description="rate of every fabric link ('none': unshaped)")
    framing: StrictBool = Field(False, description="count Ethernet framing on the links")

    presets: ClassVar[Dict[str, Dict[str, object]]] = {
        # 4 trials: the fewest whose Wilson interval can tell "all on one link" from chance
        "quick": {"trials": 4, "duration": 3, "rounds": 3, "budget_s": 90},
        "default": {},
        "full": {},  # the post's own: 10 trials of 10 s per policy
    }
    cli_aliases: ClassVar[Dict[str, str]] = {"policy": "policies"}
    repeat_field: ClassVar[str] = "trials"
