"""``nslab link set A-B``, ``nslab link show``, ``nslab link reset``: a running
lab's links changed while it runs (:mod:`nslab.traffic.linkset`)."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import click

from ..errors import InputError
from ..model.checks import LinkChange
from ..model.naming import RUN_RE
from ..runtime.caps import require_root
from ..safeio import printable
from .checkcli import find_lab
from .cliutil import echo

EXAMPLES = """\b
  nslab link set spine2-server1 --down          spine2's end down (server1 loses carrier)
  nslab link set spine2-server1 --up
  nslab link set h1-s1 --rate 10Mbit            on both directions, over the topology's shaping
  nslab link set h1-s1 --delay 50ms --jitter 5ms --loss 1%   (needs netem in the kernel)
  nslab link show                               every link: state, shaping, run-time changes
  nslab link reset [h1-s1]                      back to the topology (every changed link)"""

#: The options of ``nslab link set``, by the field of :class:`LinkChange` they fill.
OPTION_OF = {"rate": "--rate", "delay": "--delay", "jitter": "--jitter", "loss": "--loss",
             "state": "--down/--up", "link": "LINK"}


@click.group("link", epilog=EXAMPLES)
def link_group() -> None:
    """Change a running lab's links: rate, delay, jitter, loss, down and up."""


def change_of(values: Dict[str, Any]) -> LinkChange:
    """The typed change the options give (as a stage's ``links:`` item is
    typed); one line naming the option that is wrong."""
    from pydantic import ValidationError
    try:
        return LinkChange.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = [p for p in err.get("loc", ()) if isinstance(p, str)]
        msg = str(err.get("msg", "invalid")).replace("Value error, ", "")
        opt = OPTION_OF.get(loc[0]) if loc else None
        value = values.get(loc[0]) if loc else None
        shown = f" {printable(value)[:40]}" if opt and value is not None and opt.startswith("--") \
            else ""
        if not loc:
            msg = msg.replace("give rate, delay, jitter, loss, state or reset",
                              "give --rate, --delay, --jitter, --loss, --down or --up")
        raise InputError(f"nslab link set{' ' + opt if opt else ''}{shown}: {msg}") from None


@link_group.command("set", epilog=EXAMPLES)
@click.argument("link")
@click.argument("run", required=False)
@click.option("--rate", default=None, metavar="RATE", help="e.g. 100Mbit, 1Gbit (htb or tbf).")
@click.option("--delay", default=None, metavar="TIME", help="e.g. 50ms (netem).")
@click.option("--jitter", default=None, metavar="TIME", help="e.g. 5ms, with a delay (netem).")
@click.option("--loss", default=None, metavar="PCT", help="e.g. 1% (netem).")
@click.option("--down", "state", flag_value="down", default=None,
              help="The first node's end down: the other loses its carrier.")
@click.option("--up", "state", flag_value="up", help="Both ends up.")
def set_cmd(link: str, run: Optional[str], rate: Optional[str], delay: Optional[str],
            jitter: Optional[str], loss: Optional[str], state: Optional[str]) -> None:
    """Change LINK (A-B: the link between nodes A and B) of a running lab.

    RUN is the lab's run id (with none and one lab up, that one). A rate,
    delay, jitter or loss goes on both directions, over the topology's own
    shaping; changes add up until `nslab link reset`. A kernel without netem
    (see `nslab doctor`) refuses a delay, jitter or loss.
    """
    change = change_of({"link": link, "rate": rate, "delay": delay, "jitter": jitter,
                        "loss": loss, "state": state})
    from ..traffic.linkset import LiveLab, set_link
    require_root("nslab link set")
    lab = LiveLab.of(find_lab(_run(run)))
    ll, now = set_link(lab, change)
    echo(f"lab {lab.run_id}: link {ll.name} ({ll.ends[0]}, {ll.ends[1]}): "
         f"{now.describe() or 'as in the topology'}")


@link_group.command("show")
@click.argument("run", required=False)
def show_cmd(run: Optional[str]) -> None:
    """Every link of a running lab: its ends' state, its shaping now, and
    what was set at run time."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    from ..traffic.linkset import LiveLab, show_links
    require_root("nslab link show")
    lab = LiveLab.of(find_lab(_run(run)))
    table = Table(title=Text(f"lab {lab.run_id}: links"))
    for col in ("link", "ends", "state", "shaping", "set at run time"):
        table.add_column(col)
    for row in show_links(lab):
        table.add_row(*(Text(printable(c)) for c in row))
    Console().print(table)


@link_group.command("reset")
@click.argument("words", nargs=-1, metavar="[LINK] [RUN]")
def reset_cmd(words: Tuple[str, ...]) -> None:
    """Put LINK (or every link changed at run time) back as the topology has it."""
    from ..traffic.linkset import LiveLab, reset_links
    link = next((w for w in words if "-" in w), None)
    run = next((w for w in words if RUN_RE.fullmatch(w)), None)
    rest = [w for w in words if w not in (link, run)]
    if rest:
        raise InputError(f"nslab link reset: {printable(rest[0])[:40]!r} is neither a link "
                         "(A-B) nor a run id")
    if link is not None:
        change_of({"link": link, "reset": True})
    require_root("nslab link reset")
    lab = LiveLab.of(find_lab(run))
    done = reset_links(lab, link)
    echo(f"lab {lab.run_id}: " + (f"reset {', '.join(done)}" if done
                                  else "no link was changed at run time"))


def _run(run: Optional[str]) -> Optional[str]:
    if run is not None and not RUN_RE.fullmatch(run):
        raise InputError(f"{printable(run)[:40]!r} is not a run id (nl3f2a)")
    return run
