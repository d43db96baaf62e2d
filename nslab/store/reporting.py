"""Reports are templates over stored files: jinja2 renders Markdown from a
study's ``templates/`` folder; Python-Markdown turns it into HTML inside one
page template. Nothing is concatenated by hand, and nothing needs root.

Stored files are untrusted, so no value from one becomes markup: every
template value is escaped for Markdown on its way out (:func:`md_escape`, the
environment's ``finalize``) unless nslab wrote it as Markdown itself
(:class:`MarkdownText`); raw HTML is not passed through; and a link or image
may point only at an http(s) address or a relative path (:func:`safe_url`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import html
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..model.kinds import tools as kind_tools

from ..safeio import write_atomic
from .glance import QUIET_HOST, claims_table
from .records import ON_TIME_MS, disturbed
from .results import ResultStore

if TYPE_CHECKING:  # jinja2 is imported where a report is rendered: a run that only
    import jinja2  # measures (the virtual bed's guest, under TCG) never pays for it


@dataclass
class Claim:
    """One claim of a study, checked: what the source says, what we measured
    (with its interval), and the verdict (``agrees``/``disagrees``/``undecided``)
    with the reason. ``published`` is the source's own figure the claim is
    judged against, in words with its unit (``"66.2 kfps (Table 3)"``), taken
    from the published data; empty when the claim has no single published number.
    ``reads`` names the points whose records the claim is judged on, each as
    the point parameters it must have (a parameter left out matches any
    value): a later sampling round measures again only the points of claims
    still undecided (:func:`serves`). None: not said, so every point serves it.
    ``decide``, for an undecided claim, is the one thing that would decide it,
    in a few words ("run the default preset", "--loss-sweeps 2", "a quiet
    host"); empty: the report derives it from ``why``
    (:func:`nslab.store.glance.to_decide`)."""

    claim: str
    measured: str
    verdict: str
    why: str
    source: str = ""
    published: str = ""
    reads: Optional[List[Dict[str, Any]]] = None
    decide: str = ""

    def __post_init__(self) -> None:
        from .stats import VERDICTS
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.claim!r}: verdict {self.verdict!r} is not one of "
                             f"{', '.join(VERDICTS)}")


def named(top: object) -> str:
    """"most to chromium (120 ms), kworker/1 (8 ms)" from a record's ``top``
    list (its [name, ms] pairs; "" when none ran half a millisecond)."""
    if not isinstance(top, (list, tuple)) or not top:
        return ""
    parts = []
    for item in top[:3]:
        try:
            name, ms = str(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
        if ms >= 0.5:  # a task that barely ran names nothing
            parts.append(f"{name} ({ms:.0f} ms)")
    return "most to " + ", ".join(parts) if parts else ""


def note_interference(claims: List[Claim], records: List[Any]) -> List[Claim]:
    """The claims, an undecided one's reason followed by the host
    interference that left points out, if any did (``host.disturbed``); when
    it left out half the points or more, a quiet host is what would decide
    them (:attr:`Claim.decide`, unless the claim says otherwise). The note is
    the same in every row: the report states it once, above its table."""
    hit = [r.host for r in records if disturbed(r)]
    if not hit:
        return claims
    worst = max(hit, key=lambda h: h.worst_pct)
    waits = [h.bed_wait_pct for h in hit if h.bed_wait_pct is not None]
    who = named(worst.top)
    held = sum(1 for h in hit if getattr(h, "busy_for_good", False))
    again = (f"measured again, but {held} once the host had stayed busy through the re-runs "
             "before them" if held else "measured again")
    # records from before the lab's wait was measured were judged on others' share alone
    wait = (f", and the lab's own tasks waited for a CPU up to {max(waits):.0f} % of "
            "the CPUs' time (summed over its tasks)," if waits else "")
    stolen = [h.steal_pct for h in hit if getattr(h, "steal_pct", None)]
    steal = (f" the hypervisor withheld up to {max(stolen):.0f} % of the CPUs' time,"
             if stolen and max(stolen) >= 0.5 else "")
    lost = sum(1 for h in hit if getattr(h, "exits_lost", False))
    dropped = (f"; at {lost} the kernel dropped threads' exit reports, so what they took "
               "is not known" if lost else "")
    lates = [max(h.late_ms.values()) for h in hit if getattr(h, "late_ms", None)]
    kept = sum(1 for x in lates if x <= ON_TIME_MS)
    late = (f"; a thread at the lab's priority woke up to {max(lates):.0f} ms past its "
            "timer" if lates else "")
    if kept:
        late += (f"; {kept} of them stayed within {ON_TIME_MS:g} ms on every CPU, and "
                 "the times timers decide were kept from those")
    note = (f"host interference: other tasks took up to {worst.worst_pct:.0f} % of "
            f"the CPUs{wait}{',' if steal and not wait else ''}{steal} during {len(hit)} of "
            f"{len(records)} points ({again}, then left out"
            f"{'; at worst ' + who if who else ''}{dropped}{late})")
    most = 2 * len(hit) >= len(records)
    return [dataclasses.replace(c, why=f"{c.why}; {note}",
                                decide=c.decide or (QUIET_HOST if most else ""))
            if c.verdict == "undecided" else c for c in claims]


def serves(point: Dict[str, Any], claims: List[Claim]) -> bool:
    """Whether measuring ``point`` again can move one of ``claims``: a claim
    that does not say what it reads (``reads`` None) is served by every point."""
    return any(c.reads is None or any(all(point.get(k) == v for k, v in want.items())
                                      for want in c.reads) for c in claims)


@dataclass
class StudyReport:
    """What ``Study.report`` wrote: files by kind, the claims, and Markdown
    for the reproduction's combined report. That Markdown leaves the claims
    out (the combined report lists every study's claims once, in its first
    table); the study's own ``report.md`` lists them (:func:`render_study`)."""

    files: Dict[str, str]
    claims: List[Claim] = field(default_factory=list)
    markdown: str = ""
    figures: List[str] = field(default_factory=list)


@dataclass
class StoredRun:
    """A run directory as a report reads it: typed records, provenance, the
    configuration it ran with, and the published numbers it is compared with."""

    path: str
    records: List[Any]
    prov: Dict[str, Any]
    cfg: Dict[str, Any]
    published: Dict[str, Any]
    #: pictures of the labs' topologies in the run directory (file names)
    topologies: List[str] = field(default_factory=list)


def load_run(run_dir: str, schema: Any, study: str) -> StoredRun:
    """Read ``run_dir`` through ``schema`` (a :class:`~nslab.store.records.RecordSchema`);
    ``study`` names the published reference data to compare with."""
    from .published import load_published
    prov = ResultStore.open(run_dir).provenance()
    pictures = sorted(f for f in os.listdir(run_dir)
                      if f.startswith("topology-") and f.endswith(".svg"))
    return StoredRun(run_dir, schema.load(run_dir), prov, prov.get("config", {}),
                     load_published(study), pictures)


_CORE_TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "templates")


def _num(x: Any, digits: int = 0) -> str:
    """``12,345`` / ``12,345.6``; blank for None."""
    if x is None:
        return ""
    return MarkdownText(f"{float(x):,.{digits}f}")


def _mbps(bps: Any, digits: int = 1) -> str:
    return "" if bps is None else MarkdownText(f"{float(bps) / 1e6:.{digits}f}")


def _pct(x: Any, digits: int = 1, signed: bool = False) -> str:
    if x is None:
        return ""
    return MarkdownText(f"{float(x) * 100:{'+' if signed else ''}.{digits}f} %")


class MarkdownText(str):
    """Markdown that nslab wrote itself (a study's own rendered report, a
    value already escaped): a template writes it as it is. Every other value
    is escaped (:func:`md_escape`)."""

    __slots__ = ()


#: Characters with an inline meaning in Markdown (code, emphasis, links and
#: images, table cells, escapes); ``_`` only where it could open or close
#: emphasis (``gap_ms`` stays as it is).
_MD_SPECIAL = re.compile(r"[\\`*\[\]|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


#: What opens a block when it starts a line: a heading, a quote, a list item,
#: a rule or setext underline (``-``, ``+``, ``=``), a numbered item.
_MD_BLOCK_START = re.compile(r"[#>]|[+=-](?=[\s+=-]|$)|\d+(?=[.)](?:\s|$))")


def md_escape(value: Any) -> MarkdownText:
    """``value`` as plain text in Markdown, wherever a template puts it: on
    one line (line breaks become spaces: no table row or fence of its own),
    ``&`` and ``<`` as entities (no raw HTML, no autolink, no entity of its
    own), the inline markup characters (``\\ ` * _ [ ] |``) backslash-escaped
    (no link, image, code or emphasis; a table cell stays one cell), and what
    would open a block at the start of a line (``#``, ``>``, ``-``, ``1.``,
    indentation) or break one at its end (two spaces) neutralised. (A
    template must not follow a value at the start of a line with ``.`` or
    ``)``: "0" then ". " would number a list; a unit test checks.)"""
    text = "" if value is None else str(value)
    text = re.sub(r"[\r\n]+", " ", text).replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text)
    if text[:1].isspace():
        text = f"&#{ord(text[0])};{text[1:]}"
    if text[-1:].isspace():
        text = f"{text[:-1]}&#{ord(text[-1])};"
    start = _MD_BLOCK_START.match(text)
    if start:
        end = start.end()
        if start.group(0)[0].isdigit():  # 1. -> 1\.
            text = f"{text[:end]}\\{text[end:]}"
        elif text[0] == "=":  # no Markdown escape for '='
            text = "&#61;" + text[1:]
        else:
            text = "\\" + text
    return MarkdownText(text)


def _finalize(value: Any) -> Any:
    """What every ``{{ ... }}`` of a Markdown template writes: numbers as they
    are, :class:`MarkdownText` as it is, anything else through :func:`md_escape`."""
    if isinstance(value, MarkdownText) or (isinstance(value, (int, float))
                                           and not isinstance(value, bool)):
        return value
    return md_escape(value)


def environment(template_dir: str) -> jinja2.Environment:
    """A jinja2 environment for Markdown templates in ``template_dir`` (and the
    core's shared ones). Markdown is not HTML, so jinja2's HTML autoescape
    would not do (it leaves ``[x](javascript:...)`` as it is): every value
    goes through :func:`md_escape` instead (``finalize``), whatever filter the
    template applies; ``cell`` is that escape made explicit for a table cell,
    ``code`` the form for a fenced code block, ``url`` the form for a link or
    image target (a file name), ``claim_rows`` a list of claims as a claims
    table shows them (:func:`nslab.store.glance.claims_table`: shared reasons
    stated once). HTML is made by :func:`to_html`."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([template_dir, _CORE_TEMPLATES]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False, finalize=_finalize)
    env.filters.update(num=_num, mbps=_mbps, pct=_pct, cell=_cell, code=_code, url=_url,
                       tools=tools_line, claim_rows=claims_table)
    return env


#: The tools a report names, by their key in a provenance's ``versions``.
#: The core's; the registered kinds add theirs (:class:`nslab.model.kinds.Tool`).
TOOL_NAMES = {"iperf2": "iperf", "iproute2": "iproute2", "ethtool": "ethtool",
              **{t.name: t.label or t.name for t in kind_tools()}}


def tools_line(provs: Any, *keys: str) -> MarkdownText:
    """``iperf 2.1.8, FRR 8.4.4, Python 3.11.2``: the versions of the
    tools ``keys`` (see :data:`TOOL_NAMES`) and Python that one run's
    provenance recorded, or several runs' (a list: a version that differs
    between them shows each, joined by " / "); "?" where none was recorded.
    In a template: ``Tools: {{ prov | tools("iperf2", "frr") }}``."""
    runs = [provs] if isinstance(provs, dict) else list(provs)

    def seen(get: Callable[[Dict[str, Any]], Any]) -> str:
        found: List[str] = []
        for prov in runs:
            value = get(prov) if isinstance(prov, dict) else None
            if value not in (None, "") and str(value) not in found:
                found.append(str(value))
        return " / ".join(found) or "?"

    def version(key: str) -> Callable[[Dict[str, Any]], Any]:
        def get(prov: Dict[str, Any]) -> Any:
            versions = prov.get("versions")
            return versions.get(key) if isinstance(versions, dict) else None
        return get

    parts = [f"{TOOL_NAMES.get(k, k)} {seen(version(k))}" for k in keys]
    parts.append(f"Python {seen(lambda prov: prov.get('python'))}")
    return md_escape(", ".join(parts))


def _cell(value: Any) -> MarkdownText:
    """A value made safe for one Markdown table cell (no pipe, no line break,
    no markup): :func:`md_escape`, blank for None."""
    return md_escape(value)


def _url(value: Any) -> MarkdownText:
    """A file name as a relative link target: percent-encoded, so it ends
    nowhere early (``)``, a space, a ``"title"``) and names no scheme (``:``)."""
    return MarkdownText(urllib.parse.quote(str(value)))


def _code(value: Any) -> MarkdownText:
    """A value inside a fenced code block, where Markdown escapes would show:
    as it is, except that a line that could close the fence is indented."""
    text = "" if value is None else str(value)
    return MarkdownText(re.sub(r"(?m)^(?=[ \t]*(?:`{3,}|~{3,}))", " ", text))


def render(template_dir: str, name: str, **context: Any) -> str:
    """Render ``name`` from ``template_dir`` with ``context``."""
    return environment(template_dir).get_template(name).render(**context)


def render_study(template_dir: str, name: str, **context: Any) -> Tuple[str, str]:
    """A study's report template rendered twice: whole (its own ``report.md``,
    claims included: ``claims_table`` true, as when the template is rendered
    without it) and without its claims table (``claims_table`` false), the
    part the reproduction's combined report shows under the study's heading,
    after its one table of every claim."""
    template = environment(template_dir).get_template(name)
    return (template.render(claims_table=True, **context),
            template.render(claims_table=False, **context))


#: Link and image targets a report may hold: these schemes, or none (a path
#: relative to the report, a ``#fragment``).
SAFE_SCHEMES = ("http", "https")
#: Attributes that hold an address.
URL_ATTRIBUTES = ("href", "src", "srcset", "action", "formaction", "background", "poster",
                  "cite", "data", "xlink:href")


def safe_url(url: str) -> bool:
    """Is ``url`` an http(s) address or a relative one, as a browser will
    read it? Character references are decoded (repeatedly: ``&amp;#106;``),
    and every space and control character is dropped (browsers drop tabs and
    line breaks anywhere, and controls at the ends) before looking for a
    scheme, so ``java&#x09;script:``, ``&#106;avascript:``, `` JAVASCRIPT:``
    and ``javascript&colon;`` are all seen for what they are. Anything that
    might be read as a scheme other than http(s) is refused (``data:``,
    ``vbscript:``, ``file:``, ``mailto:``...)."""
    text = url
    for _ in range(8):
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    else:
        return False
    text = re.sub(r"[\x00-\x20\x7f]", "", text)
    scheme = re.match(r"([^:/?#]*):", text)
    return scheme is None or scheme.group(1).lower() in SAFE_SCHEMES


def _safe_links_extension() -> Any:
    """A Python-Markdown extension whose tree processor, run last, drops every
    address attribute :func:`safe_url` refuses (the link keeps its text, an
    image its alt text) and any event handler attribute."""
    from markdown.extensions import Extension
    from markdown.treeprocessors import Treeprocessor
    from markdown.util import AMP_SUBSTITUTE, ETX, STX

    def unsafe(value: str) -> bool:
        # a placeholder becomes '&' after serialising (an e-mail link's
        # entities); any other placeholder would become stashed text: refused
        value = value.replace(AMP_SUBSTITUTE, "&")
        return STX in value or ETX in value or not safe_url(value)

    class SafeLinks(Treeprocessor):
        def run(self, root: Any) -> None:
            for el in root.iter():
                for name in list(el.attrib):
                    key = name.lower()
                    if key.startswith("on") or (key in URL_ATTRIBUTES and unsafe(el.attrib[name])):
                        del el.attrib[name]

    class SafeLinksExtension(Extension):
        def extendMarkdown(self, md: Any) -> None:  # noqa: N802 - Python-Markdown's name
            md.treeprocessors.register(SafeLinks(md), "nslab_safe_links", -100)

    return SafeLinksExtension()


#: Words a report writes as a verdict, coloured in its HTML (the word stays:
#: the colour only repeats it).
VERDICT_WORDS = ("agrees", "disagrees", "undecided", "not run")


def _verdicts_extension() -> Any:
    """A Python-Markdown extension that gives each verdict its class (the page
    colours it): a bold word that is a verdict (``**agrees**``), or a table
    cell that holds only one. Classes come from :data:`VERDICT_WORDS`, never
    from the text."""
    from markdown.extensions import Extension
    from markdown.treeprocessors import Treeprocessor

    class Verdicts(Treeprocessor):
        def run(self, root: Any) -> None:
            for el in root.iter():
                if el.tag not in ("strong", "td") or len(el):
                    continue
                word = (el.text or "").strip()
                if word in VERDICT_WORDS:
                    el.set("class", "verdict " + word.replace(" ", "-"))

    class VerdictsExtension(Extension):
        def extendMarkdown(self, md: Any) -> None:  # noqa: N802 - Python-Markdown's name
            md.treeprocessors.register(Verdicts(md), "nslab_verdicts", -90)

    return VerdictsExtension()


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?: |$)")


def lists_apart(markdown_text: str) -> str:
    """``markdown_text`` with a blank line before every list that follows a
    paragraph (or a table, a heading) directly: Python-Markdown, like the
    original Markdown, does not let a list interrupt a paragraph, and such a
    list reads as one run-on paragraph. A list item's own continuation lines,
    and fenced code, are left as they are."""
    out: List[str] = []
    fence: Optional[str] = None
    block: Optional[str] = None  # None: after a blank line; "list" or "other"
    for line in markdown_text.split("\n"):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            out.append(line)
            continue
        if opened:
            fence, block = opened.group(1), "other"
        elif not line.strip():
            block = None
        elif _LIST_ITEM.match(line):
            if block == "other":
                out.append("")
            block = "list" if block != "list" else block
        elif block is None:
            block = "other"
        out.append(line)
    return "\n".join(out)


def to_html(markdown_text: str, title: str, base: Optional[str] = None) -> str:
    """A whole HTML page for Markdown text (tables and code blocks included).
    Raw HTML inside the Markdown is escaped, not passed through; a link or
    image whose target is not http(s) or relative loses it (:func:`safe_url`).
    Verdicts get their class, so the page colours them (:data:`VERDICT_WORDS`)."""
    import markdown
    from markupsafe import Markup
    md = markdown.Markdown(extensions=["tables", "fenced_code", "toc", _verdicts_extension(),
                                       _safe_links_extension()])
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    body = md.convert(markdown_text)
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_CORE_TEMPLATES), autoescape=True)
    return env.get_template("page.html.j2").render(title=title, body=Markup(body), base=base)


def write(run_dir: str, name: str, text: str) -> str:
    """Write ``text`` to ``run_dir/name`` by rename (a link there is replaced,
    never written through: :func:`nslab.safeio.write_atomic`)."""
    return write_atomic(os.path.join(run_dir, name), text)


_WRITING: contextvars.ContextVar[bool] = contextvars.ContextVar("nslab_report_writing",
                                                                default=True)


@contextlib.contextmanager
def claims_only() -> Iterator[None]:
    """Within it, a study's report judges its claims but writes no file and
    draws no figure (:func:`study_report`; a study that draws before it asks
    :func:`writing`): how a run looks at its claims between sampling rounds,
    so that each run's report is rendered once, at the end."""
    token = _WRITING.set(False)
    try:
        yield
    finally:
        _WRITING.reset(token)


def writing() -> bool:
    """Whether the report being computed is written (False under :func:`claims_only`)."""
    return _WRITING.get()


#: Set to 1, reports are written without their figures: the stock-kernel tier's
#: guests set it (under TCG, drawing one study's figures took 30 s and more; the
#: figures are tested on the host's tiers, the kernels' features there).
NO_PLOTS_ENV = "NSLAB_NO_PLOTS"


def study_report(run_dir: str, markdown_text: str, title: str, claims: List[Claim],
                 plot: Optional[Callable[[], Dict[str, str]]] = None,
                 body: Optional[str] = None) -> StudyReport:
    """Write ``report.md``/``report.html`` and, when given, the plot (a callable
    returning its files, ``plot_png`` among them); the study's report.
    ``body`` is the Markdown for the combined report, without the claims
    (:func:`render_study`); ``markdown_text`` when not given. Under
    :func:`claims_only`, nothing is written or drawn: the claims and the
    Markdown only."""
    if not writing():
        return StudyReport(files={}, claims=claims,
                           markdown=markdown_text if body is None else body)
    files = write_markdown_and_html(run_dir, "report", markdown_text, title)
    figures: List[str] = []
    if plot is not None and os.environ.get(NO_PLOTS_ENV) != "1":
        out = plot()
        files.update(out)
        figures.append(out["plot_png"])
    return StudyReport(files=files, claims=claims,
                       markdown=markdown_text if body is None else body, figures=figures)


def write_markdown_and_html(run_dir: str, stem: str, markdown_text: str, title: str) -> Dict[str, str]:
    """``<stem>.md`` and ``<stem>.html`` in ``run_dir`` (lists set apart from
    the paragraph before them: :func:`lists_apart`)."""
    markdown_text = lists_apart(markdown_text)
    return {"md": write(run_dir, f"{stem}.md", markdown_text),
            "html": write(run_dir, f"{stem}.html", to_html(markdown_text, title))}
