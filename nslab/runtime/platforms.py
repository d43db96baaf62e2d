"""Which distribution this is, and the known problems of what it ships.

``nslab doctor`` prints the distribution and the versions of the tools the
lab drives, then names each known problem it sees. The facts here were
measured (Debian 12 and 13) or are read from the distributions' package
lists (Ubuntu 24.04, WSL2); the troubleshooting pages in ``docs/`` say more.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from ..model.kinds import tools as kind_tools

#: Distributions whose package names ``scripts/setup-system.sh`` knows.
KNOWN = {"debian": ("12", "13"), "ubuntu": ("24.04",)}


@dataclass(frozen=True)
class Distribution:
    """``/etc/os-release`` as far as nslab uses it."""

    id: str
    version_id: str
    pretty: str
    wsl: bool = False

    @property
    def known(self) -> bool:
        """Whether ``scripts/setup-system.sh`` knows its package names."""
        return self.version_id in KNOWN.get(self.id, ())

    def __str__(self) -> str:
        return self.pretty + (" (WSL2)" if self.wsl else "")


def parse_os_release(text: str) -> Dict[str, str]:
    """``KEY=value`` lines (values maybe quoted), as os-release(5) writes them."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r'^([A-Z_][A-Z0-9_]*)=(.*)$', line.strip())
        if m:
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out[m.group(1)] = value
    return out


def distribution(os_release: Optional[str] = None, kernel: Optional[str] = None) -> Distribution:
    """This machine's distribution (``os_release``/``kernel`` for tests)."""
    if os_release is None:
        os_release = ""
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            try:
                with open(path, encoding="utf-8") as f:
                    os_release = f.read()
                break
            except OSError:
                continue
    info = parse_os_release(os_release)
    kernel = kernel if kernel is not None else os.uname().release
    return Distribution(info.get("ID", "unknown"), info.get("VERSION_ID", ""),
                        info.get("PRETTY_NAME", info.get("ID", "unknown")),
                        "microsoft" in kernel.lower())


def _major_minor(version: Optional[str]) -> Optional[tuple]:
    if not version:
        return None
    m = re.search(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def known_problems(dist: Distribution, versions: Mapping[str, Optional[str]]) -> List[str]:
    """One line per known problem of this distribution and these tool versions."""
    out: List[str] = []
    if not dist.known and not dist.wsl:
        out.append(f"{dist}: scripts/setup-system.sh does not know this distribution's package "
                   "names; install the packages listed in docs/troubleshooting.md by hand")
    if dist.id == "ubuntu":
        out.append("Ubuntu: chromium is a snap there; the browser tests look for a chromium "
                   "or google-chrome binary and skip, naming it, when none runs headless")
    if dist.wsl:
        out.append("WSL2: its kernel has netem, htb, tbf, OVS and 802.1Q as modules but no pktgen "
                   "module; nslab-pktgen needs none, and `nslab bench generator` leaves out the kernel's "
                   "own pktgen")
    iperf = _major_minor(versions.get("iperf2"))
    if iperf is not None and iperf >= (2, 2):
        out.append(f"iperf {versions.get('iperf2')}: its -P SUM line is computed differently from "
                   "2.1.x (989-998 Mbit/s where 2.1.8 claims 1.2 Gbit/s at -P 254); the alias "
                   "report says which version produced each figure")
    for tool in kind_tools():
        have, oldest = _major_minor(versions.get(tool.name)), _major_minor(tool.oldest)
        if have is not None and oldest is not None and have < oldest:
            out.append(f"{tool.label or tool.name} {versions.get(tool.name)}: {tool.too_old}")
    return out
