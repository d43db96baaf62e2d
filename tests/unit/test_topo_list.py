"""`nslab topo list`: plain text (no reStructuredText), every option of every
ready topology with what it does and its default, read from the topology's
signature and the Args: section of its docstring."""
from typing import Optional

from nslab.cmdline.cli import main
from nslab.cmdline.topocli import describe_topology, plain
from nslab.run.registry import topologies


def sample(k: int = 2, switch: str = "bridge", bw: Optional[str] = None, framing: bool = False,
           stp: bool = True, _private: int = 0) -> None:
    """k hosts on :class:`~nslab.model.topo.Topology`'s switch
    ``s1``.

    More about it, not in the summary.

    Args:
        k: how many hosts.
        switch: ``bridge`` or
            ``ovs``.
        bw: the rate.
        framing: count the framing.

    Returns:
        nothing.
    """


def test_a_docstring_reads_as_plain_text_with_each_option():
    summary, options = describe_topology(sample)
    assert summary == "k hosts on Topology's switch s1."
    assert options == [("--k N", "how many hosts (default: 2)"),
                       ("--switch VALUE", "bridge or ovs (default: bridge)"),
                       ("--bw VALUE", "the rate"),
                       ("--framing", "count the framing (a flag)"),
                       ("--stp", "(not described) (on unless --stp false)")]
    assert plain("``a``, :func:`nslab.x.y`, :mod:`z`") == "a, y, z"


def test_topo_list_describes_every_option_of_every_ready_topology(capsys):
    assert main(["topo", "list"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out and "\\x" not in out
    assert "(not described)" not in out
    for name in topologies():
        assert f"\n{name}: " in "\n" + out
    assert "  --bw VALUE" in out and "(default: 1Gbit)" in out
    assert max(len(line) for line in out.splitlines()) <= 100
