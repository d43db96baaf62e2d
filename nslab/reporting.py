"""Reports are templates over stored files: jinja2 renders Markdown from a
study's ``templates/`` folder; Python-Markdown turns it into HTML inside one
page template. Nothing is concatenated by hand, and nothing needs root.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import jinja2

@dataclass
class Claim:
    """One claim of a study, checked: what the source says, what we measured
    (with its interval), and the verdict (``agrees``/``disagrees``/``undecided``)
    with the reason."""

    claim: str
    measured: str
    verdict: str
    why: str
    source: str = ""

    def __post_init__(self) -> None:
        from .stats import VERDICTS
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.claim!r}: verdict {self.verdict!r} is not one of "
                             f"{', '.join(VERDICTS)}")


@dataclass
class StudyReport:
    """What ``Study.report`` wrote: files by kind, the claims, and Markdown
    for the reproduction's combined report."""

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
    """Read ``run_dir`` through ``schema`` (a :class:`~nslab.records.RecordSchema`);
    ``study`` names the published reference data to compare with."""
    from .published import load_published
    from .results import ResultStore
    prov = ResultStore.open(run_dir).provenance()
    pictures = sorted(f for f in os.listdir(run_dir)
                      if f.startswith("topology-") and f.endswith(".svg"))
    return StoredRun(run_dir, schema.load(run_dir), prov, prov.get("config", {}),
                     load_published(study), pictures)


_CORE_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def _num(x: Any, digits: int = 0) -> str:
    """``12,345`` / ``12,345.6``; blank for None."""
    if x is None:
        return ""
    return f"{float(x):,.{digits}f}"


def _mbps(bps: Any, digits: int = 1) -> str:
    return "" if bps is None else f"{float(bps) / 1e6:.{digits}f}"


def _pct(x: Any, digits: int = 1, signed: bool = False) -> str:
    if x is None:
        return ""
    return f"{float(x) * 100:{'+' if signed else ''}.{digits}f} %"


def environment(template_dir: str) -> jinja2.Environment:
    """A jinja2 environment for Markdown templates in ``template_dir`` (and the
    core's shared ones). Markdown is not HTML: no autoescape here; HTML is
    made by :func:`to_html`, which escapes raw HTML in the Markdown."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([template_dir, _CORE_TEMPLATES]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)
    env.filters.update(num=_num, mbps=_mbps, pct=_pct, cell=_cell)
    return env


def _cell(value: Any) -> str:
    """A value made safe for one Markdown table cell (no pipe, no line break)."""
    return str("" if value is None else value).replace("|", "\\|").replace("\n", " ")


def render(template_dir: str, name: str, **context: Any) -> str:
    """Render ``name`` from ``template_dir`` with ``context``."""
    return environment(template_dir).get_template(name).render(**context)


def to_html(markdown_text: str, title: str, base: Optional[str] = None) -> str:
    """A whole HTML page for Markdown text (tables and code blocks included).
    Raw HTML inside the Markdown is escaped, not passed through."""
    import markdown
    from markupsafe import Markup
    md = markdown.Markdown(extensions=["tables", "fenced_code", "toc"])
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    body = md.convert(markdown_text)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_CORE_TEMPLATES), autoescape=True)
    return env.get_template("page.html.j2").render(title=title, body=Markup(body), base=base)


def write(run_dir: str, name: str, text: str) -> str:
    path = os.path.join(run_dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def study_report(run_dir: str, markdown_text: str, title: str, claims: List[Claim],
                 plot: Optional[Callable[[], Dict[str, str]]] = None) -> StudyReport:
    """Write ``report.md``/``report.html`` and, when given, the plot (a callable
    returning its files, ``plot_png`` among them); the study's report."""
    files = write_markdown_and_html(run_dir, "report", markdown_text, title)
    figures: List[str] = []
    if plot is not None:
        out = plot()
        files.update(out)
        figures.append(out["plot_png"])
    return StudyReport(files=files, claims=claims, markdown=markdown_text, figures=figures)


def write_markdown_and_html(run_dir: str, stem: str, markdown_text: str, title: str) -> Dict[str, str]:
    """``<stem>.md`` and ``<stem>.html`` in ``run_dir``."""
    return {"md": write(run_dir, f"{stem}.md", markdown_text),
            "html": write(run_dir, f"{stem}.html", to_html(markdown_text, title))}
