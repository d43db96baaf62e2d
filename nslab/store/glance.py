"""A report's first screen: each study in one line (what it found, how many
of its claims were decided, and for each undecided claim the one thing that
would decide it), and the reasons several rows of a claims table share,
stated once above it.

Pure functions over claims (:class:`nslab.store.reporting.Claim`, read by
their attributes ``claim``, ``verdict``, ``why`` and ``decide``); a template
escapes what they return.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: What decides a claim that host interference left undecided, said by the
#: claims that know no better (a study with a bed no host can disturb says so).
QUIET_HOST = "a quiet host (nothing else running on its CPUs)"
#: What decides an undecided claim whose reason does not say: another round
#: of the points it reads (every study takes ``--rounds``).
MORE_SAMPLES = "more samples (--rounds 2)"
#: A part of a reason (between top-level "; ") this long or longer, shared
#: verbatim by two rows or more of one table, is stated once above it.
SHARED_WORDS = 20
#: Claim names a study's line lists per group before "and N more".
LISTED = 4


def reason_parts(why: str) -> List[str]:
    """``why`` cut at each "; " outside parentheses and brackets (the parts of
    a reason that was built by joining its causes)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(why):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and why[i + 1:i + 2] == " ":
            parts.append(why[start:i].strip())
            start = i + 2
    parts.append(why[start:].strip())
    return [p for p in parts if p]


def to_decide(claim: Any) -> str:
    """The one thing that would decide ``claim`` (empty when it is decided):
    its own ``decide`` when its study said it; else what its reason says to
    run ("...; undecided: run the default preset" gives "run the default
    preset"); else, when host interference is its first reason,
    :data:`QUIET_HOST`; else :data:`MORE_SAMPLES`."""
    if claim.verdict != "undecided":
        return ""
    if getattr(claim, "decide", ""):
        return str(claim.decide)
    parts = reason_parts(str(claim.why))
    for part in parts:
        if part.startswith("undecided: "):
            return part[len("undecided: "):]
    if parts and "host interference" in parts[0]:
        return QUIET_HOST
    return MORE_SAMPLES


def short_claim(text: str) -> str:
    """A claim's words without a closing parenthesis ("Throughput rises with
    the number of aliases (posts: +7.6 %, +7.8 %)" -> "Throughput rises with
    the number of aliases"): what a study's one line names it by."""
    cut = re.sub(r"\s*\([^()]*\)$", "", text.strip())
    return cut or text.strip()


@dataclass
class Row:
    """A claims table's row: the claim, its study (the reproduction's table)
    and the reason as the row shows it (shared parts replaced by "see note N";
    what would decide it added when the reason does not say)."""

    claim: Any
    why: str
    study: str = ""


@dataclass
class ClaimsTable:
    """A claims table as a report shows it: the reasons several rows share,
    each stated once (``notes``, numbered from 1), and the rows."""

    rows: List[Row]
    notes: List[str] = field(default_factory=list)


def claims_table(claims: Sequence[Any], studies: Optional[Sequence[str]] = None,
                 min_words: int = SHARED_WORDS) -> ClaimsTable:
    """``claims`` (and the study of each, for a table of several studies) as
    rows. A part of a reason (:func:`reason_parts`) of at least ``min_words``
    words that two rows or more share word for word becomes a note, stated
    once above the table; each row that had it says "see note N" instead.
    An undecided row whose reason does not say what would decide it gets
    "to decide: ..." (:func:`to_decide`)."""
    names = list(studies) if studies is not None else [""] * len(claims)
    split = [reason_parts(str(c.why)) for c in claims]
    seen: Dict[str, int] = {}
    for parts in split:
        for p in set(parts):
            if len(p.split()) >= min_words:
                seen[p] = seen.get(p, 0) + 1
    notes: List[str] = []
    rows = []
    for c, study, parts in zip(claims, names, split):
        shown = []
        for p in parts:
            if seen.get(p, 0) >= 2:
                if p not in notes:
                    notes.append(p)
                p = f"see note {notes.index(p) + 1}"
            if p not in shown:
                shown.append(p)
        why = "; ".join(shown)
        decide = to_decide(c)
        if decide and decide not in str(c.why):
            why = f"{why}; to decide: {decide}" if why else f"to decide: {decide}"
        rows.append(Row(c, why, study))
    return ClaimsTable(rows, notes)


@dataclass
class StudyLine:
    """One study on the first screen: how many of its claims were decided,
    which agree and which disagree (their short names), and the undecided
    ones grouped by what would decide them (``undecided``: [(to decide, names)],
    in the order their first claim comes)."""

    total: int
    decided: int
    agrees: List[str] = field(default_factory=list)
    disagrees: List[str] = field(default_factory=list)
    undecided: List[Tuple[str, List[str]]] = field(default_factory=list)

    @staticmethod
    def listed(names: List[str], most: int = LISTED) -> Tuple[List[str], int]:
        """The first ``most`` of ``names`` and how many more there are (a
        template writes "and N more")."""
        return names[:most], max(0, len(names) - most)


def study_line(claims: Sequence[Any]) -> StudyLine:
    """What a study found, for its line on the first screen."""
    line = StudyLine(total=len(claims), decided=0)
    groups: Dict[str, List[str]] = {}
    shorts = [short_claim(str(c.claim)) for c in claims]
    for c, name in zip(claims, shorts):
        if shorts.count(name) > 1:  # what the parenthesis told apart, it still must
            name = str(c.claim).strip()
        if c.verdict == "agrees":
            line.agrees.append(name)
        elif c.verdict == "disagrees":
            line.disagrees.append(name)
        else:
            groups.setdefault(to_decide(c), []).append(name)
    line.decided = len(line.agrees) + len(line.disagrees)
    line.undecided = list(groups.items())
    return line


def short_title(title: str, fallback: str = "") -> str:
    """A study's title up to its first comma ("Study 3: RFC 2544, Linux
    bridge vs Linux router" -> "Study 3: RFC 2544"): its name on the first
    screen."""
    return title.split(",")[0].strip() or fallback
