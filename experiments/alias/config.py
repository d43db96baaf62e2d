"""The alias study's configuration: every option of ``nslab run alias``, typed,
with its presets defined once."""
from __future__ import annotations

import re
from typing import ClassVar, Dict, List, Optional

from pydantic import Field, StrictBool, field_validator, model_validator
from typing_extensions import Annotated, Literal

from nslab.model.fields import IfName, RateText, UniqueList
from nslab.run.study import StudyConfig

from .model import alias_addresses

#: The posts' alias counts.
POST_ALIASES = [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 254]
QUICK_ALIASES = [1, 254]
ADDR_TEMPLATE = "192.168.2.%d"
MODES = ("alias", "parallel")
Mode = Literal["alias", "parallel"]
DEFAULT_MODES: List[Mode] = ["alias"]


class AliasConfig(StudyConfig):
    """Throughput vs number of aliases: what to sweep and how to measure it."""

    aliases: UniqueList[Annotated[int, Field(ge=1, le=65534)]] = Field(
        default_factory=lambda: list(POST_ALIASES), description="N values")
    duration: Annotated[float, Field(ge=2, le=3600)] = Field(10.0, description="seconds per point")
    repeat: Annotated[int, Field(ge=1, le=100)] = Field(3, description="repeats (order shuffled)")
    rate: RateText = Field("1Gbit", description="link rate ('none' = unshaped)")
    framing: StrictBool = Field(False, description="count Ethernet framing (GbE's 941 Mbit/s)")
    switch: Literal["none", "bridge", "ovs"] = Field("none", description="one veth, or a switch")
    mss: Optional[Annotated[int, Field(ge=88, le=9000)]] = Field(None, description="iperf -M")
    nodelay: StrictBool = Field(False, description="TCP_NODELAY (iperf -N)")
    cc: Optional[str] = Field(None, description="congestion control (iperf -Z)")
    modes: UniqueList[Mode] = Field(
        default_factory=lambda: list(DEFAULT_MODES),
        description="alias: one client per alias (the posts); parallel: -P N to one address")
    addr_template: str = Field(ADDR_TEMPLATE, description="alias addresses, with one %d")
    prefix: Annotated[int, Field(ge=1, le=32)] = Field(16, description="prefix length of the aliases")
    uplink: Optional[IfName] = Field(None, description="two-box mode: a NIC as the client's uplink")
    force: StrictBool = Field(False, description="allow the NIC of the default route or SSH")

    presets: ClassVar[Dict[str, Dict[str, object]]] = {
        # enough repeats for an interval at the two ends of the posts' range;
        # the budget holds three rounds of all 9 points (~60 s each here, the
        # first two measured 59.5 and 60.8 s on 2026-12-01: the 254 clients of
        # a point take ~3.6 s after their 3 s to drain their send queues and
        # report); a later round reads only the points its open claims need
        "quick": {"aliases": QUICK_ALIASES, "duration": 3, "repeat": 3,
                  "modes": ["alias", "parallel"], "rounds": 3, "budget_s": 210},
        "default": {},
        # the seeds' own sweep (10 s points instead of the posts' 60 s) with the control
        "full": {"modes": ["alias", "parallel"]},
    }
    cli_aliases: ClassVar[Dict[str, str]] = {"variants": "modes"}

    @field_validator("cc")
    @classmethod
    def _cc(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.fullmatch(r"[a-z0-9_]{1,16}", v):
            raise ValueError(f"{v!r} is not a congestion control name (e.g. cubic, bbr)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "AliasConfig":
        from nslab.errors import InputError
        if self.uplink and self.switch not in ("none", "ovs"):
            raise ValueError("--uplink puts the client behind OVS: drop --switch or use ovs")
        if self.duration < 2:
            raise ValueError(f"{self.duration:g} s is too short to measure a window")
        try:
            alias_addresses(self.addr_template, max(self.aliases), self.prefix)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return self
