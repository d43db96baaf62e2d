"""FRR on a lab across hosts, as its controller sees it: each router reached
through its host (``vtysh`` over SSH), and when the daemons started on the
controller's clock. Made by :meth:`FrrExtension.remote
<nslab.frr.router.FrrExtension.remote>` from what each host's agent told
(:meth:`FrrExtension.agent_facts <nslab.frr.router.FrrExtension.agent_facts>`)."""
from __future__ import annotations

from typing import Any, Dict, Optional


class RemoteRouter:
    """Enough of an FRR router to ask it questions (``vtysh``) on its host."""

    def __init__(self, node: Any, vty_dir: str) -> None:
        self.node = node
        self.dir = vty_dir

    def vtysh(self, command: str) -> str:
        return self.node.run(["vtysh", "--vty_socket", self.dir, "-c", command], check=False,
                             timeout=20).stdout


class RemoteFrr:
    """What studies read of the FRR extension: when the daemons started (on this
    controller's clock) and each router."""

    def __init__(self, started_at: Optional[float], routers: Dict[str, RemoteRouter]) -> None:
        self.started_at = started_at
        self.routers = routers
