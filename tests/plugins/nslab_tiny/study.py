"""Tiny: ping RTT over the lab's pair, a few times. Everything a study needs,
in one folder, registered by one entry point line
(``nslab.studies: tiny = nslab_tiny.study:TinyStudy``)."""
from __future__ import annotations

import os
import re
from typing import Any, ClassVar, Dict, List

from pydantic import Field
from typing_extensions import Annotated

from nslab.store.records import Record, RecordSchema, Strict
from nslab.store.reporting import Claim, StudyReport, render, write_markdown_and_html
from nslab.store.stats import mean
from nslab.run.study import Measured, Point, Study, StudyConfig, expand


class TinyConfig(StudyConfig):
    pings: Annotated[int, Field(ge=1, le=100)] = 3
    repeat: Annotated[int, Field(ge=1, le=10)] = 2
    presets: ClassVar[Dict[str, Dict[str, object]]] = {"quick": {"pings": 2}, "default": {},
                                                        "full": {"repeat": 5}}


class TinyPoint(Strict):
    repeat: int


class TinyMeasurements(Strict):
    rtt_ms: float


SCHEMA = RecordSchema(Record[TinyPoint, TinyMeasurements], version=1)


class TinyRunner:
    def __init__(self, lab: Any, cfg: TinyConfig) -> None:
        self.lab, self.cfg = lab, cfg

    def setup(self) -> Dict[str, Any]:
        return {"peer": self.lab["h2"].ip}

    def measure(self, point: Point) -> Measured:
        out = self.lab["h1"].run(["ping", "-c", str(self.cfg.pings), "-i", "0.2",
                                  self.lab["h2"].ip]).stdout
        rtt = float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))
        return Measured({"rtt_ms": rtt}, [], f"rtt {rtt:.3f} ms")

    def finish(self) -> None:
        pass


class TinyStudy(Study[TinyConfig]):
    name = "tiny"
    title = "Tiny: ping over a veth"
    source = "tests/plugins"
    order = 99
    Config = TinyConfig
    records = SCHEMA

    def needs(self, cfg: TinyConfig) -> List[str]:
        return ["tool:ip"]

    def labs(self, cfg: TinyConfig) -> Dict[str, Any]:
        from nslab.topologies import pair
        return {"pair": pair()}

    def points(self, cfg: TinyConfig) -> List[Dict[str, Any]]:
        return expand({}, cfg.repeat)

    def runner(self, key: str, lab: Any, cfg: TinyConfig, store: Any) -> TinyRunner:
        return TinyRunner(lab, cfg)

    def report(self, run_dir: str) -> StudyReport:
        recs = SCHEMA.load(run_dir)
        est = mean([r.measurements.rtt_ms for r in recs])
        claims = [Claim("A veth round trip takes under a millisecond", est.fmt(unit=" ms", digits=3),
                        "agrees" if est.ci and est.ci.high < 1.0 else "undecided",
                        "t interval over the repeats", self.source)]
        md = render(os.path.join(os.path.dirname(__file__), "templates"), "report.md.j2",
                    recs=recs, claims=claims)
        return StudyReport(files=write_markdown_and_html(run_dir, "report", md, self.title),
                           claims=claims, markdown=md)
