"""A study written as a file: one more kind of :class:`~nslab.run.study.Study`,
run by the same :func:`~nslab.run.study.run_study` as the built-in ones (store,
resume, provenance, progress, report). Loading and checking the file is
:mod:`.spec`.
"""
from __future__ import annotations

import json
import os
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type

from pydantic import BeforeValidator, Field, ValidationError, create_model, model_validator
from typing_extensions import Annotated

from nslab.frr.options import bgp_of
from nslab.errors import InputError
from nslab.safeio import write_atomic
from nslab.run.study import Study, StudyConfig, StudyReport, expand
from nslab.model.topo import Topology
from nslab.runtime.node import LabLike

from .model import Convergence, Cpu, LinkNetem, Scalar
from .spec import (STORED_NAME, LAB_OVERHEAD_S, TRIAL_OVERHEAD_S, Loaded, check, field_of, lab_key,
                   load)


# -- the study ---------------------------------------------------------------------------
def _scalar(value: Any) -> Any:
    """A value from the command line (``true``, ``2``, ``link-down``) as YAML reads it."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


CliScalar = Annotated[Scalar, BeforeValidator(_scalar)]


class FileStudyConfig(StudyConfig):
    """What the configuration of every study file has: ``repeat`` and ``duration``
    (:func:`config_class` gives them the file's defaults and their bounds) and one
    list per sweep key; any value is checked against the file, like the file's own."""

    #: the file a class made by :func:`config_class` checks its values against
    loaded: ClassVar[Optional[Loaded]] = None
    #: configuration field -> sweep key
    sweep_keys: ClassVar[Dict[str, str]] = {}

    repeat: int = 1
    duration: float = 1.0

    @model_validator(mode="after")
    def _against_file(self) -> "FileStudyConfig":
        loaded = type(self).loaded
        if loaded is None:  # not made from a file: nothing to check against
            return self
        spec = loaded.spec
        sweep = {key: list(getattr(self, f)) for f, key in self.sweep_keys.items()}
        try:
            trial = Loaded(spec.model_copy(update={"sweep": sweep, "duration": self.duration,
                                                   "repeat": self.repeat, "presets": {}}),
                           loaded.path, loaded.text, loaded.doc, spec, loaded.checks)
            check(trial)
            if spec.captures and self.rounds > 1:
                # each later sampling round adds `repeat` trials to a point: the
                # captures of every trial of the last round count
                from .captures import check as check_captures
                check_captures(trial, rounds=self.rounds)
        except (InputError, ValidationError) as exc:
            # FILE:LINE: field: problem -- the line in the file the value conflicts with
            given = ", ".join(f"{k}={v}" for k, v in (("duration", self.duration),
                                                     ("repeat", self.repeat))
                              + ((("rounds", self.rounds),) if self.rounds > 1 else ()))
            raise ValueError(f"{exc} (with {given})") from None
        return self


def config_class(loaded: Loaded) -> Type[FileStudyConfig]:
    """The typed configuration of a study file: ``repeat``, ``duration`` and one
    list per sweep key, with the file's presets; any value given on the command
    line is checked against the file like the file's own."""
    spec = loaded.spec
    fields: Dict[str, Any] = {
        "repeat": (Annotated[int, Field(ge=1, le=1000)],
                   Field(spec.repeat, description="trials per point")),
        "duration": (Annotated[float, Field(gt=0, le=3600)],
                     Field(spec.duration, description="s of traffic per trial")),
    }
    keys: Dict[str, str] = {}
    for key, values in spec.sweep.items():
        fname = field_of(key)
        if fname in fields or fname in keys or fname in StudyConfig.model_fields:
            raise loaded.fail(("sweep", key), f"{key} clashes with another option ({fname})")
        keys[fname] = key
        fields[fname] = (Annotated[List[CliScalar], Field(min_length=1, max_length=1000)],
                         Field(list(values), description=f"values of {key}"))
    presets: Dict[str, Dict[str, Any]] = {"quick": {}, "default": {}, "full": {}}
    for name, p in spec.presets.items():
        d: Dict[str, Any] = {}
        if p.repeat is not None:
            d["repeat"] = p.repeat
        if p.duration is not None:
            d["duration"] = p.duration
        if p.rounds is not None:
            d["rounds"] = p.rounds
        if p.budget_s is not None:
            d["budget_s"] = p.budget_s
        d.update({field_of(k): v for k, v in p.sweep.items()})
        presets[name] = d

    cls = create_model(f"Config_{field_of(spec.name)}", __base__=FileStudyConfig, **fields)
    cls.presets = presets
    cls.sweep_keys = keys
    cls.loaded = loaded
    return cls


class FileStudy(Study[FileStudyConfig]):
    """A study written as a file; ``study_class(path)`` makes its class."""

    Config: ClassVar[Type[FileStudyConfig]] = FileStudyConfig
    loaded: ClassVar[Loaded]
    #: how a user names it on `nslab run` (the file's path)
    invocation: ClassVar[str] = ""

    @classmethod
    def sweep(cls, cfg: Any) -> Dict[str, List[Any]]:
        keys = cls.Config.sweep_keys
        return {key: list(getattr(cfg, f)) for f, key in keys.items()}

    @classmethod
    def resolved(cls, cfg: Any) -> Loaded:
        """The file with this configuration's sweep and duration, checked again."""
        spec = cls.loaded.spec
        # the file was validated once; the configuration's values were validated by it
        out = Loaded(spec.model_copy(update={"sweep": cls.sweep(cfg), "duration": cfg.duration,
                                             "repeat": cfg.repeat, "presets": {}}),
                     cls.loaded.path, cls.loaded.text, cls.loaded.doc, spec, cls.loaded.checks)
        check(out)
        return out

    def needs(self, cfg: Any) -> List[str]:
        lo = self.resolved(cfg)
        out = {"tool:ip"}
        for topo in lo.topologies.values():
            out.update(topo.needs())
            if any(bgp_of(n) for n in topo.nodes.values()):
                out.add("frr")
        if any(f.kind.startswith("iperf") for f in lo.spec.traffic):
            out.add("tool:iperf")
        if any(f.kind == "ping" for f in lo.spec.traffic):
            out.add("tool:ping")
        if any(f.kind == "pktgen" for f in lo.spec.traffic):
            from nslab.traffic.pktgen import pktgen_path
            pktgen_path()  # not built: one line saying how, before anything is built
        if any(isinstance(e, LinkNetem) for e in lo.spec.events):
            out.add("netem")
        if lo.spec.captures:
            out.add("tool:dumpcap")
        return sorted(out)

    def labs(self, cfg: Any) -> Dict[str, Topology]:
        return dict(self.resolved(cfg).topologies)

    def lab_key(self, cfg: Any, point: Dict[str, Any]) -> str:
        swept = [k.split(".", 1)[1] for k in point if k.startswith("topology.")]
        opts = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("topology.")}
        return lab_key(opts, swept)

    def points(self, cfg: Any) -> List[Dict[str, Any]]:
        """Every sweep combination for each repeat (shuffled after the first, seeded);
        grouped by lab so each lab is built once."""
        from .analysis import matches
        excluded = self.loaded.spec.exclude
        pts = [p for p in expand(self.sweep(cfg), cfg.repeat)
               if not any(matches(p, ex) for ex in excluded)]
        if not pts:
            raise InputError(f"{self.loaded.path}: exclude leaves no point to measure")
        order = list(self.labs(cfg))
        return sorted(pts, key=lambda p: order.index(self.lab_key(cfg, p)))

    def check_hosts(self, cfg: Any) -> None:
        """What a study file reads from a node's kernel on this machine is not
        read across hosts yet, so a study across hosts that needs it is refused
        before anything is built: ``captures:``, ``convergence`` and ``cpu``
        metrics, and BGP routers (their resting routes are read every 20 ms
        by ``ip -n`` here, which SSH could not keep up with)."""
        spec = self.loaded.spec
        if spec.captures:
            raise self.loaded.fail(("captures",), "a study across hosts (--hosts) cannot take "
                                   "captures yet (nslab capture on the controller captures a "
                                   "running lab across hosts); run it on one host, or without "
                                   "captures:")
        for i, m in enumerate(spec.metrics):
            if isinstance(m, (Convergence, Cpu)):
                raise self.loaded.fail(("metrics", i), f"a study across hosts (--hosts) cannot "
                                       f"measure {m.metric} yet (read from the node's kernel on "
                                       "this machine); run it on one host")
        routers = sorted({n for topo in self.labs(cfg).values()
                          for n, node in topo.nodes.items() if bgp_of(node)})
        if routers:
            raise self.loaded.fail(("topology",), "a study across hosts (--hosts) cannot run "
                                   f"BGP routers yet ({', '.join(routers[:3])}"
                                   f"{' ...' if len(routers) > 3 else ''}: their routes are "
                                   "read on this machine); run it on one host")

    def runner(self, key: str, lab: LabLike, cfg: Any, store: Any) -> Any:
        from .runner import FileRunner
        # the run keeps the file it ran (by rename: a link there is replaced, not followed)
        write_atomic(os.path.join(store.path, STORED_NAME), self.loaded.text)
        return FileRunner(lab, self.resolved(cfg), store)

    def describe_point(self, point: Dict[str, Any]) -> str:
        return " ".join(f"{k.split('.')[-1]}={v}" for k, v in point.items())

    def report(self, run_dir: str) -> StudyReport:
        from .report import write_report
        return write_report(run_dir, self.loaded)

    @classmethod
    def estimate(cls, cfg: Any) -> Tuple[int, int, float]:
        """(labs, points, seconds) a run with ``cfg`` should take."""
        self = cls()
        n_labs, n_points = len(self.labs(cfg)), len(self.points(cfg))
        settle = cls.loaded.spec.settle
        return n_labs, n_points, (n_labs * LAB_OVERHEAD_S +
                                  n_points * (cfg.duration + settle + TRIAL_OVERHEAD_S))


def study_class(path: str) -> Type[FileStudy]:
    """The :class:`FileStudy` class of the file at ``path`` (checked)."""
    loaded = load(path)
    spec = loaded.spec
    from .analysis import TIMED_METRICS
    from .records import SCHEMA
    attrs = {"name": spec.name, "title": spec.title, "source": spec.source, "order": spec.order,
             "invocation": path,
             "Config": config_class(loaded), "records": SCHEMA, "loaded": loaded,
             "watches_timers": any(m.metric in TIMED_METRICS for m in spec.metrics),
             "__doc__": spec.title}
    return type(f"FileStudy_{field_of(spec.name)}", (FileStudy,), attrs)
