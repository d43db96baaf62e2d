"""Studies as plugins: data plus a runner, driven by one :func:`run_study`.

A study (one folder under ``experiments/``, one entry point in
``nslab.studies``) declares:

* ``Config``: a typed configuration (:class:`StudyConfig`, pydantic) with named
  presets (``quick``, ``default``, ``full``) defined once;
* ``needs(cfg)``: capabilities, checked before anything is built;
* ``labs(cfg)``: the labs it needs, by key (one per DUT for RFC 2544);
* ``points(cfg)``: the parameter points, each a dict, with ``lab_key`` saying
  which lab measures it;
* ``runner(key, lab, cfg, store)``: an object with ``setup()``,
  ``measure(point)`` and ``finish()``;
* ``records``: its typed, versioned record model (:mod:`nslab.store.records`);
* ``report(run_dir)``: the report, from stored files only (no root).

:func:`run_study` does the rest for every study: the results directory and
provenance, resume (points already stored are skipped), progress, labs built
and torn down, and the report. No study re-implements the sweep.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import statistics
import sys
import time
from collections import Counter
from typing import (Any, Callable, ClassVar, ContextManager, Dict, Generic, Hashable, List, Mapping,
                    NamedTuple, Optional, Protocol, Sequence, TypeVar, Tuple, Type)

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import Annotated, Self

from ..errors import InputError
from ..runtime.grants import HostGrants
from ..runtime.node import LabLike
from ..store.records import RecordSchema
from ..store.reporting import Claim, StudyReport, claims_only, serves
from ..store.results import ResultStore, point_key
from ..safeio import printable, tree_is_safe, write_atomic
from ..runtime import caps
from ..runtime import lab as lab_module
from ..model.naming import new_run_id
from ..model.limits import check_plan
from ..model.topo import explain, loc_path

__all__ = ["Claim", "ConfigError", "PRESETS", "Progress", "Runner", "Study", "StudyConfig",
           "StudyReport", "expand", "open_store", "results_dir_of", "run_study"]

log = logging.getLogger(__name__)

PRESETS = ("quick", "default", "full")


def expand(grid: Mapping[str, Sequence[Any]], repeat: int, shuffle_seed: Optional[int] = 0
           ) -> List[Dict[str, Any]]:
    """All combinations of ``grid`` for repeats 0..repeat-1; order shuffled within
    each repeat after the first (seeded, so a resumed sweep sees the same order)."""
    combos: List[Dict[str, Any]] = [{}]
    for k in grid:
        combos = [dict(c, **{k: v}) for c in combos for v in grid[k]]
    points = []
    rng = random.Random(shuffle_seed)
    for rep in range(repeat):
        batch = [dict(c, repeat=rep) for c in combos]
        if rep > 0 and shuffle_seed is not None:
            rng.shuffle(batch)
        points.extend(batch)
    return points


class ConfigError(InputError):
    """A study configuration that does not validate: the message, and the field's
    location, offending value and reason (for a command line to name its option)."""

    def __init__(self, message: str, loc: Tuple[Any, ...] = (), value: Any = None,
                 reason: str = "") -> None:
        super().__init__(message)
        self.loc, self.value, self.reason = loc, value, reason


class StudyConfig(BaseModel):
    """Base of every study's configuration: typed fields with defaults (the
    ``default`` preset), named presets as overrides of them, and the CLI
    spellings the study's command keeps (``cli_aliases``: option -> field)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    #: preset name -> values that differ from the field defaults
    presets: ClassVar[Dict[str, Dict[str, Any]]] = {"default": {}}
    #: extra CLI option names, e.g. {"policy": "policies"}
    cli_aliases: ClassVar[Dict[str, str]] = {}
    #: the field that counts repeats of every point (a sampling round adds as many)
    repeat_field: ClassVar[str] = "repeat"

    rounds: Annotated[int, Field(ge=1, le=10)] = Field(
        1, description="sample to a decision: measure every point in up to this many rounds, "
        "judging the claims after each and stopping once all are decided; intervals are drawn "
        "at 1 - 0.05/rounds (Bonferroni over the looks), so no look decides wrongly more than "
        "5 % of the time in all")
    host_pct: Annotated[float, Field(gt=0, le=100)] = Field(
        10.0, description="a point during which other tasks took more than this share "
        "(percent) of the CPUs, and the lab's own threads waited for a CPU more than it too, "
        "is measured again, and left out of the verdicts if it stays so")
    host_reruns: Annotated[int, Field(ge=0, le=5)] = Field(
        1, description="times a point disturbed by other tasks is measured again")
    budget_s: Optional[Annotated[float, Field(gt=0, le=86400)]] = Field(
        None, description="seconds of measuring after which no further round starts "
        "(a round is begun only if the rounds so far leave time for one more; what a busy "
        "host took, its disturbed points and re-runs, is given back, up to half the budget)")

    @classmethod
    def preset(cls, name: str = "default", **overrides: Any) -> Self:
        """The configuration of preset ``name`` with ``overrides`` on top."""
        if name not in cls.presets:
            raise InputError(f"unknown preset {name!r} (this study has: "
                             f"{', '.join(cls.presets)})")
        data = {**cls.presets[name], **overrides}
        return cls.parse(data)

    def sampling_rounds(self) -> int:
        """How many sampling rounds :func:`run_study` may run: ``rounds``; a
        study whose bed repeats itself to the frame runs one (a second round
        would measure the same trials again)."""
        return self.rounds

    @classmethod
    def saved(cls, data: Dict[str, Any], where: str = "") -> Self:
        """A configuration read back from a run's provenance (on resume): as
        :meth:`parse`; a study whose defaults changed since a run was stored
        fills in what that run used."""
        return cls.parse(data, where)

    @classmethod
    def parse(cls, data: Dict[str, Any], where: str = "") -> Self:
        """Validate ``data``; errors name the field in one line (after ``where``)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            msg = explain(exc, (), cls)
            err = exc.errors(include_url=False)[0]
            raise ConfigError(f"{where}: {msg}" if where else msg,
                              loc_path(tuple(err.get("loc", ()))), err.get("input"),
                              str(err.get("msg", "invalid")).removeprefix("Value error, ")
                              ) from None


#: A point of a study's grid: its parameters by name (``{"n": 16, "repeat": 0}``).
Point = Dict[str, Any]
#: A study's configuration type (its ``Config``, a :class:`StudyConfig` or like one).
ConfigT = TypeVar("ConfigT")


class Measured(NamedTuple):
    """What a runner measured at one point."""

    #: the point's measurements, as the study's record schema types them
    measurements: Dict[str, Any]
    #: paths of the raw outputs kept beside the records (relative to the run)
    raw: List[str]
    #: one line for the progress display
    summary: str


class Runner(Protocol):
    """What a study's runner does with one lab."""

    def setup(self) -> Dict[str, Any]:
        """Prepare the lab; return facts for the provenance."""

    def measure(self, point: Point) -> Measured:
        """Measure one point."""

    def finish(self) -> None:
        """Keep what must be kept before the lab goes (e.g. daemon logs)."""


class Study(Generic[ConfigT]):
    """Base class of studies (see the module docstring), generic over its
    configuration type: ``class AliasStudy(Study[AliasConfig])``."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: where it comes in ``nslab reproduce`` and its report
    order: ClassVar[int] = 100
    #: which published sources it reproduces (shown in reports)
    source: ClassVar[str] = ""
    Config: ClassVar[Type[StudyConfig]] = StudyConfig
    records: ClassVar[RecordSchema]
    #: sysctls recorded in the provenance of every lab
    sysctls: ClassVar[Sequence[str]] = ()
    #: a point measured while other tasks took more than ``host_pct`` of a CPU
    #: is measured again (False: the study re-runs its own trials and the
    #: point's host figure is only recorded)
    reruns_points: ClassVar[bool] = True
    #: its figures depend on how fast the host's CPUs run it, so ``nslab
    #: reproduce`` runs it before it starts a study in a guest beside the
    #: others (the RFC 2544 virtual bed's QEMU takes only CPU time no other
    #: task wants, but shares the caches and the memory bus); False: it may
    #: run beside that guest
    alone: ClassVar[bool] = False
    #: the lab a sampling round measured last stays up, while the claims are
    #: judged, for the next round, which starts on it if it needs it (else it
    #: goes first); it is not built, set up and (with BGP) converged again.
    #: False for a study whose set-up belongs to its :meth:`session`, which
    #: is held only while a round runs (RFC 2544's CPU split, under its lock):
    #: each round then builds its labs again
    keeps_labs: ClassVar[bool] = True
    #: some of its values are times that protocol timers decide (an outage,
    #: a route's convergence): each point records how late the lab's timers
    #: could have fired on each CPU (:mod:`nslab.traffic.lateness`,
    #: ``host.late_ms``), which reports read to keep a disturbed point whose
    #: timers were on time (:func:`nslab.store.records.on_time`)
    watches_timers: ClassVar[bool] = False
    #: while it measures, its processes get the CPU first
    #: (:mod:`nslab.runtime.cpufirst`); False for a study that splits the
    #: CPUs itself and reads a CPU's idle time as its DUT's (RFC 2544's real
    #: bed: a daemon it does not start, ovs-vswitchd, forwards there)
    cpu_first: ClassVar[bool] = True

    def needs(self, cfg: ConfigT) -> List[str]:
        return []

    def check_hosts(self, cfg: ConfigT) -> None:
        """Raise one line if this study cannot run on labs across hosts
        (``--hosts``, :class:`~nslab.hosts.remote.MultiLab`); called before anything
        is built. Every study can, unless it says otherwise."""

    def labs(self, cfg: ConfigT) -> Dict[str, Any]:
        raise NotImplementedError

    def lab_key(self, cfg: ConfigT, point: Point) -> str:
        keys = list(self.labs(cfg))
        return keys[0]

    def points(self, cfg: ConfigT) -> List[Point]:
        raise NotImplementedError

    def session(self, cfg: ConfigT) -> ContextManager[Any]:
        """Held around each sampling round (e.g. a machine-wide lock)."""
        return contextlib.nullcontext()

    def runner(self, key: str, lab: LabLike, cfg: ConfigT, store: ResultStore) -> Runner:
        raise NotImplementedError

    def report(self, run_dir: str) -> StudyReport:
        raise NotImplementedError

    def figures(self, run_dir: str) -> Dict[str, float]:
        """A run's headline figures by name, from its stored records (``nslab
        bench verdicts`` shows how far each moves from run to run); none by
        default."""
        return {}

    def elsewhere(self, cfg: ConfigT) -> Optional[Callable[..., None]]:
        """What runs this study somewhere else than this machine's namespaces,
        or None (the default): here. A study whose trials run in a guest (the
        RFC 2544 virtual bed) returns a callable ``(cfg, store, run_id,
        progress)`` that fills the run's store there; :func:`run_study` hands
        it the store it made, with the configuration already saved in it."""
        return None

    def note(self, cfg: ConfigT) -> Optional[str]:
        """Something the user should know before the run starts (printed on stderr)."""
        return None

    def describe_point(self, point: Point) -> str:
        return " ".join(f"{k}={v}" for k, v in point.items())

    def cost_kind(self, point: Point) -> Hashable:
        """Points of one kind take about as long as each other (the progress
        line's estimate of the time left reads each kind's own mean); by
        default every point is of one kind."""
        return None

    def needed(self, cfg: ConfigT, points: List[Point],
               open_claims: List[Any]) -> List[Point]:
        """Of a later sampling round's ``points``, those that can move one of
        ``open_claims`` (the claims still undecided): the points a claim
        ``reads``, or every point for a claim that does not say
        (:func:`~nslab.store.reporting.serves`)."""
        return [p for p in points if serves(p, open_claims)]


class Progress:
    """One line per point on stderr, with a rich progress bar on a terminal:
    ``[3/39] n=16 repeat=1: 941.2 Mbit/s (~12 s left)``.

    ``kinds``: each point's kind (:meth:`Study.cost_kind`), in any order; the
    time left is each point still to come at the mean of those of its kind
    measured so far, or at the mean of all so far while none of its kind is
    (a throughput search takes minutes, a latency trial seconds)."""

    def __init__(self, total: int, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 kinds: Optional[Sequence[Hashable]] = None) -> None:
        self.total, self.done, self.enabled, self.clock = total, 0, enabled, clock
        self.started = self.last = clock()
        self.todo: Counter[Hashable] = Counter(kinds if kinds is not None else [None] * total)
        self.took: Dict[Hashable, List[float]] = {}
        self._bar = None
        if enabled and total and sys.stderr.isatty():
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar,
                                       TextColumn, TimeRemainingColumn)
            self._bar = Bar(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeRemainingColumn(), transient=True)
            self._task = self._bar.add_task("measuring", total=total)
            self._bar.start()

    def left(self) -> float:
        """Seconds the points still to come should take (see the class)."""
        overall = (self.last - self.started) / self.done if self.done else 0.0
        return sum(n * (statistics.fmean(self.took[k]) if k in self.took else overall)
                   for k, n in self.todo.items() if n > 0)

    def point(self, desc: str, summary: str, kind: Hashable = None) -> None:
        """A point of ``kind`` is measured (``desc``, with ``summary``)."""
        now = self.clock()
        self.done += 1
        self.took.setdefault(kind, []).append(now - self.last)
        self.last = now
        if self.todo[kind] > 0:
            self.todo[kind] -= 1
        if not self.enabled:
            return
        left = self.left()
        # a point's parameters come from a study file: escaped on the terminal
        line = printable(f"[{self.done}/{self.total}] {desc}: {summary} (~{left:.0f} s left)")
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
            self._bar.advance(self._task)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def open_store(study: Study[Any], cfg: Any, results_root: str, run_id: Optional[str],
               resume: Optional[str] = None) -> Tuple[ResultStore, Any]:
    """A new run directory (made fresh, under ``run_id`` or a free id: see
    :meth:`ResultStore.create`), or on resume the existing one with the
    configuration it was started with (validated again). A directory to
    resume must be nslab's own (:func:`~nslab.safeio.tree_is_safe`): nslab
    runs as root and appends to it."""
    if not resume:
        return ResultStore.create(results_root, study.name, run_id), cfg
    why = tree_is_safe(resume)
    if why is not None:
        raise InputError(f"--resume {resume}: not a run directory of nslab's own ({why}); "
                         "start a new run instead")
    store = ResultStore.open(resume)
    prov = store.provenance()
    if prov.get("experiment") not in (None, "", study.name):
        raise InputError(f"{resume}: a {prov['experiment']} run, not {study.name}")
    saved = prov.get("config")
    if not saved:
        raise InputError(f"{resume}: no saved configuration to resume")
    return store, study.Config.saved(saved, f"{resume}: saved configuration")


def run_study(study: Study[Any], cfg: Any, results_root: str = "results",
              run_id: Optional[str] = None, resume: Optional[str] = None,
              progress: bool = True, lab_factory: Optional[Callable[..., Any]] = None,
              host_grants: Optional[HostGrants] = None,
              store: Optional[ResultStore] = None,
              clock: Callable[[], float] = time.monotonic,
              quiet: Optional[Callable[[], ContextManager[Any]]] = None) -> str:
    """Run ``study`` with ``cfg`` (or resume a run directory) and store what it
    measured. It renders no report: the report is a template over the stored
    files, rendered once by whoever shows it (``nslab run`` and ``nslab
    reproduce`` call :func:`report_of` on the returned directory; ``nslab
    report DIR`` renders it again on demand).

    A new run gets a fresh directory ``<results_root>/<study>/<run_id>``
    (a free id without ``run_id``: :meth:`ResultStore.create`), or ``store``,
    one the caller made already that way (the CLI makes it first, so that the
    run's log is named after its id); its first lab has the run's id. On
    ``resume``, ``run_id`` (default: a new one) names the first lab.

    ``host_grants`` are what the command line allows the study's topologies
    to change on this machine (see :mod:`nslab.runtime.grants`); ``None`` trusts a
    configuration given by the calling code, but never one read back from a
    run directory on ``resume``.
    ``lab_factory(topology, run_id=..., host_grants=...)`` builds each lab (default
    :class:`~nslab.runtime.lab.Lab`; :class:`~nslab.hosts.remote.MultiLab` for a lab across
    hosts). Returns the run directory. Points are appended to the records as soon as
    they are measured, so an interrupted run keeps them and a resumed one
    measures only what is missing. ``clock`` times the rounds against the
    time budget and the progress estimates (the virtual RFC 2544 bed's guest
    passes the host's clock: its own counts instructions). ``quiet()``, a
    context manager, is held around each point a study that watches its
    timers (:attr:`Study.watches_timers`) measures once the host has
    disturbed one of its points: ``nslab reproduce`` pauses the guest it runs
    beside (:func:`nslab.runtime.proc.paused_tree`).
    """
    if store is None:
        store, cfg = open_store(study, cfg, results_root, run_id, resume)
    run_id = (run_id or new_run_id()) if resume else store.run_id
    if resume and host_grants is None:
        host_grants = HostGrants()  # the configuration came from a file
    store.schema_version = study.records.version
    if getattr(getattr(lab_factory, "func", lab_factory), "remote", False):
        study.check_hosts(cfg)  # labs across hosts: what the study cannot do there, said now
    caps.require(study.needs(cfg), f"the {study.name} study")
    away = study.elsewhere(cfg)
    if away is not None:  # the study runs elsewhere (a guest), on this run's store
        prov = store.provenance()
        prov.setdefault("config", cfg.model_dump(mode="json"))
        prov.setdefault("study", study.name)
        prov.setdefault("started", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        store.write_provenance(prov)
        away(cfg, store, run_id, progress)
        return store.path
    return StudyRun(study, cfg, store, run_id, progress=progress, lab_factory=lab_factory,
                    host_grants=host_grants, clock=clock, quiet=quiet).run()


class _LabUp:
    """A built lab and its set-up runner; :meth:`close` finishes the runner
    and tears the lab down."""

    def __init__(self, key: str, runner: Any, stack: contextlib.ExitStack) -> None:
        self.key, self.runner, self.stack = key, runner, stack

    def close(self, *exc: Any) -> None:
        """Finish and tear down (``exc``: the exception that ends it, if any)."""
        self.stack.__exit__(*(exc or (None, None, None)))


class StudyRun:
    """One run of a study on this machine, in the steps :func:`run_study`
    takes once the store is open and the study runs here: each sampling
    round (:meth:`round`) measures the points it still needs, lab by lab
    (:meth:`lab`: build it, set it up, measure its points, tear it down, or
    keep the last one up for the next round: :attr:`Study.keeps_labs`);
    between rounds :meth:`next_round` judges the claims and says whether
    another round can change one, within the time budget. The sampling's
    outcome goes into the run's provenance."""

    def __init__(self, study: Study[Any], cfg: Any, store: ResultStore, run_id: str, *,
                 progress: bool = True, lab_factory: Optional[Callable[..., Any]] = None,
                 host_grants: Optional[HostGrants] = None,
                 clock: Callable[[], float] = time.monotonic,
                 quiet: Optional[Callable[[], ContextManager[Any]]] = None) -> None:
        from ..traffic.noise import idle_jitter
        self.study, self.cfg, self.store, self.run_id = study, cfg, store, run_id
        self.progress, self.host_grants, self.clock = progress, host_grants, clock
        self.lab_factory = lab_factory or lab_module.Lab
        self.rounds = cfg.sampling_rounds() if isinstance(cfg, StudyConfig) else \
            int(getattr(cfg, "rounds", 1) or 1)
        self.budget: Optional[float] = getattr(cfg, "budget_s", None)
        self.labs = study.labs(cfg)
        # before any lab is built: the plan of the last round bounds them all
        check_plan(len(self.labs), study.points(config_of_round(cfg, self.rounds - 1)),
                   f"the {study.name} study")
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.noise = idle_jitter()
        self.t0 = clock()
        self.sampling: Dict[str, Any] = {"rounds": self.rounds, "budget_s": self.budget,
                                         "rounds_run": 0,
                                         "stopped": "one round" if self.rounds == 1 else "",
                                         "host_took_s": 0.0}
        self.first_id = True  # the first lab built takes the run's id
        self.open_claims: List[Any] = []
        #: what the next round should take, from what the rounds so far cost
        self.need = 0.0
        #: what a lab's build and one point cost so far: the next round's estimate
        self.cost: Dict[str, Any] = {"points": 0, "point_s": 0.0, "labs": 0, "once_s": 0.0,
                                     "measured": 0}
        #: whether measuring a disturbed point again still pays
        self.busy = BusyHost()
        #: seconds of measuring the host took: points that came out disturbed,
        #: and the tries of the others that did (:data:`HOST_CREDIT`)
        self.host_took = 0.0
        #: the lab the last round measured on, up for the next (:attr:`Study.keeps_labs`)
        self.kept: Optional[_LabUp] = None
        #: the lateness samplers, while a study that watches its timers runs
        self.late: Optional[Any] = None
        #: held around each point once the host has disturbed one, if the
        #: study watches its timers (:func:`run_study`)
        self.quiet = quiet if study.watches_timers else None
        #: the first point measured inside it, counted from 1 over the run
        #: (None: none yet)
        self.quiet_from: Optional[int] = None

    def run(self) -> str:
        """Every round the sampling allows, with the CPU first where the
        study may (:attr:`Study.cpu_first`); returns the run directory."""
        from ..runtime.cpufirst import cpu_first
        if not self.study.cpu_first:
            return self._run()
        with cpu_first(self.run_id) as cpu:
            prov = self.store.provenance()
            prov["cpu_first"] = cpu
            self.store.write_provenance(prov)
            return self._run()

    def _run(self) -> str:
        if self.study.watches_timers and self.late is None:
            from ..traffic.lateness import start_for
            try:
                self.late = start_for()
            except (OSError, RuntimeError) as e:
                log.warning("%s: the lateness samplers did not start (%s): its points are "
                            "judged without them, as a study without timers", self.study.name, e)
        try:
            for r in range(self.rounds):
                self.round(r)
                self.sampling["rounds_run"] = r + 1
                if r + 1 == self.rounds:
                    self.sampling["stopped"] = (self.sampling["stopped"]
                                                or f"all {self.rounds} rounds measured")
                    break
                stop = self.next_round(r)
                if stop:
                    self.sampling["stopped"] = stop
                    break
        finally:
            try:
                self.drop_kept()
            finally:
                if self.late is not None:
                    self.late.close()
                    self.late = None
        self.sampling["host_took_s"] = round(self.host_took, 1)
        prov = self.store.provenance()
        prov["sampling"] = self.sampling
        self.store.write_provenance(prov)
        return self.store.path

    def round(self, r: int) -> None:
        """Round ``r``: the points of its plan not measured yet (after the
        first, only those an undecided claim reads), lab by lab."""
        study, cfg_r = self.study, config_of_round(self.cfg, r)
        plan = study.points(cfg_r)
        done = self.store.done_keys()
        todo = [p for p in plan if point_key(p) not in done]
        if r > 0:
            todo = study.needed(cfg_r, todo, self.open_claims)
        if r == 0 and len(todo) < len(plan):
            log.info("resuming %s: %d of %d points already measured", self.store.path,
                     len(plan) - len(todo), len(plan))
        if not todo:
            return
        if r > 0:
            line = (f"round {r + 1} of {self.rounds}: {len(todo)} point(s) again for the "
                    f"{len(self.open_claims)} claim(s) still undecided"
                    + (f", ~{self.need:.0f} s" if self.need else ""))
            log.info("%s", line)
            if self.progress:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        mine = {key: [p for p in todo if study.lab_key(cfg_r, p) == key] for key in self.labs}
        keys = self._lab_order([key for key in self.labs if mine[key]])
        if self.kept is None or self.kept.key != keys[0]:
            self.drop_kept()
        keep = study.keeps_labs and r + 1 < self.rounds
        self.cost["rounds"] = self.cost.get("rounds", 0) + 1
        prog = Progress(len(todo), enabled=self.progress, clock=self.clock,
                        kinds=[study.cost_kind(p) for p in todo])
        try:
            with study.session(cfg_r):
                for i, key in enumerate(keys):
                    self.lab(key, self.labs[key], mine[key], cfg_r, prog,
                             keep=keep and i == len(keys) - 1)
        finally:
            prog.close()

    def _lab_order(self, keys: List[str]) -> List[str]:
        """``keys`` in the order a round measures them: the lab kept up from
        the last round first (:attr:`Study.keeps_labs`), then reading order."""
        if self.kept is not None and self.kept.key in keys:
            return [self.kept.key] + [k for k in keys if k != self.kept.key]
        return list(keys)

    def lab(self, key: str, topo: Any, points: List[Dict[str, Any]], cfg_r: Any,
            prog: Progress, keep: bool = False) -> None:
        """Build lab ``key`` of ``topo``, set it up (its set-up goes into the
        provenance), measure ``points`` on it, appending each as it comes,
        and tear it down; or measure them on the lab the last round kept
        up (:attr:`Study.keeps_labs`), and with ``keep`` keep this one up for
        the next round (:meth:`drop_kept` tears it down)."""
        study, store = self.study, self.store
        kept, self.kept = self.kept, None
        if kept is None or kept.key != key:
            if kept is not None:
                self._close(kept)
            kept = self._build(key, topo, cfg_r)
        try:
            for point in points:
                t_point = self.clock()
                quiet = (self.quiet() if self.quiet is not None and self.quiet_from is not None
                         else contextlib.nullcontext())
                with quiet:
                    m, raw, summary, host = measure_point(study, kept.runner, point, cfg_r,
                                                          self.busy, late=self.late)
                self.cost["points"] += 1
                if host["disturbed"] and self.quiet is not None and self.quiet_from is None:
                    # the next point, counted from 1 over the run
                    self.quiet_from = self.cost["points"] + 1
                    self.sampling["quiet_from_point"] = self.quiet_from
                    log.info("%s: the host disturbed a point; from the next, what runs "
                             "beside the study is paused while each point is measured",
                             study.name)
                self.cost["measured"] += 1 + int(host.get("reruns") or 0)
                took = self.clock() - t_point
                self.cost["point_s"] += took
                self.host_took += host_share(took, host)
                store.append(point, m, raw=raw, host=host)
                if host["disturbed"]:
                    late = host.get("late_ms")
                    summary += (f" [host interference: {host['worst_pct']:.0f} % of the CPUs"
                                + ("; exits lost" if host.get("exits_lost") else "")
                                + (f"; timers late by up to {max(late.values()):.1f} ms"
                                   if late else "") + "]")
                prog.point(study.describe_point(point), summary, study.cost_kind(point))
        except BaseException:
            self._close(kept, *sys.exc_info())
            raise
        if keep:
            self.kept = kept
        else:
            self._close(kept)

    def _close(self, up: "_LabUp", *exc: Any) -> None:
        """Tear ``up`` down, its time charged to the labs (:func:`round_cost`)."""
        t = self.clock()
        try:
            up.close(*exc)
        finally:
            self.cost["lab_s"] = self.cost.get("lab_s", 0.0) + self.clock() - t

    def _build(self, key: str, topo: Any, cfg_r: Any) -> "_LabUp":
        """Lab ``key`` built and its runner set up (the set-up recorded in
        the provenance)."""
        from ..runtime.provenance import collect_provenance
        study, store = self.study, self.store
        lab_id = self.run_id if self.first_id else new_run_id()
        self.first_id = False
        _draw(topo, store.path, key)
        self.cost["labs"] += 1
        t = self.clock()
        stack = contextlib.ExitStack()
        try:
            lab = stack.enter_context(self.lab_factory(topo, run_id=lab_id,
                                                       host_grants=self.host_grants))
            runner = study.runner(key, lab, cfg_r, store)
            info = runner.setup()
            stack.callback(runner.finish)  # once set up, as the lab goes
            if isinstance(info, dict):  # set-up later labs reuse
                self.cost["once_s"] += float(info.get("once_s") or 0.0)
            _provenance(store, collect_provenance(
                lab, sysctls=study.sysctls,
                extra={"config": self.cfg.model_dump(mode="json"), "started": self.started,
                       "study": study.name, "host_noise": self.noise}), key, info)
            return _LabUp(key, runner, stack)
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise
        finally:
            self.cost["lab_s"] = self.cost.get("lab_s", 0.0) + self.clock() - t

    def drop_kept(self) -> None:
        """Tear down the lab kept up for a next round, if any."""
        kept, self.kept = self.kept, None
        if kept is not None:
            self._close(kept)

    def next_round(self, r: int) -> Optional[str]:
        """After round ``r``: why sampling stops now (every claim decided, or
        the budget would not hold the next round), else None, with the
        claims still open and what the next round should take."""
        study = self.study
        with claims_only():  # judged, not rendered: the run renders its report once, at the end
            claims = report_of(study, self.store.path).claims
        self.open_claims = [c for c in claims if c.verdict == "undecided"]
        if not self.open_claims:
            return f"every claim decided after round {r + 1}"
        spent = self.clock() - self.t0
        nxt = config_of_round(self.cfg, r + 1)
        nxt_todo = study.needed(nxt, [p for p in study.points(nxt)
                                      if point_key(p) not in self.store.done_keys()],
                                self.open_claims)
        keys = self._lab_order(sorted({study.lab_key(nxt, p) for p in nxt_todo},
                                      key=list(self.labs).index))
        # the lab kept up is not built again
        builds = len(keys) - int(bool(keys) and self.kept is not None
                                 and self.kept.key == keys[0])
        self.need = round_cost(self.cost, spent, len(nxt_todo), builds,
                               once_each=self.busy.for_good)
        credit = 0.0 if self.budget is None else min(self.host_took,
                                                     HOST_CREDIT * self.budget)
        if self.budget is not None and spent - credit + self.need > self.budget:
            given = (f", {credit:.0f} s of it given back for what the host took"
                     if credit else "")
            return (f"the time budget ({self.budget:.0f} s) would not hold another "
                    f"round (spent {spent:.0f} s in {r + 1}{given}; the next, "
                    f"{len(nxt_todo)} points, would take ~{self.need:.0f} s)")
        log.info("after round %d: %d of %d claims undecided; measuring the %d points they "
                 "need again", r + 1, len(self.open_claims), len(claims), len(nxt_todo))
        return None


#: The most of a study's time budget given back for the measuring a busy host
#: took (:func:`host_share`), as a share of the budget: the budgets were set
#: on an idle host, and beside a noisy neighbour the points it disturbed, and
#: their re-runs, took the round that would have decided (the ECMP study's
#: L3 claim missed its 90 s budget by 1 s so). A run beside a busy host may
#: so take up to 1.5 times its budget; an idle one is not changed.
HOST_CREDIT = 0.5


def host_share(took: float, host: Mapping[str, Any]) -> float:
    """Of a point's ``took`` seconds, those the host took (:func:`measure_point`'s
    ``host``): all of them where it came out disturbed (reports leave it
    out), else the share of its tries that did (its re-runs)."""
    tries = 1 + int(host.get("reruns") or 0)
    return took if host.get("disturbed") else took * (tries - 1) / tries


#: Points in a row that stayed disturbed through their re-runs after which the
#: host is taken as busy for good: a disturbed point is no longer measured
#: again in this run (as RFC 2544's trials are not,
#: :data:`nslab.experiments.rfc2544.trials.PERSISTENT`). Beside a roaming
#: noisy neighbour here, 23 of 23 re-runs stayed disturbed and doubled each
#: study's time, so that its budget held one sampling round. Only a re-run
#: that came out undisturbed breaks the row: a point measured once and
#: undisturbed says nothing of the others (beside the same neighbour the
#: alias study's points at N=1 came out undisturbed between every two at
#: N=254 that did not, and its re-runs, all in vain, took its budget's
#: second round).
BUSY_IN_A_ROW = 3


class BusyHost:
    """Whether measuring a disturbed point again still pays in this run."""

    def __init__(self) -> None:
        self.in_a_row = 0

    @property
    def for_good(self) -> bool:
        """:data:`BUSY_IN_A_ROW` points re-run in a row stayed disturbed."""
        return self.in_a_row >= BUSY_IN_A_ROW

    def after(self, tries: int, disturbed: bool) -> None:
        """A point was measured ``1 + tries`` times, and ended ``disturbed`` or not."""
        if not tries or self.for_good:
            return  # not re-run: it says nothing of whether re-runs pay
        if not disturbed:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        if self.in_a_row == BUSY_IN_A_ROW:
            log.info("the host stayed busy through %d points' re-runs in a row: disturbed "
                     "points are not measured again in this run", self.in_a_row)


def judged_pct(others_pct: float, bed_wait_pct: Optional[float],
               steal_pct: Optional[float]) -> float:
    """What the run's rule judges of a point's host figures (percent of all
    CPUs): the most other tasks can have taken from the lab (their share, or
    the lab's wait for a CPU if known and smaller:
    :func:`nslab.traffic.interference.displaced_share`), plus the
    hypervisor's steal. :func:`measure_point` judges it; a record's figures
    give it again (:func:`over_threshold`)."""
    from ..traffic.interference import displaced_share
    took = others_pct if bed_wait_pct is None else displaced_share(others_pct, bed_wait_pct)
    return took + (steal_pct or 0.0)


def over_threshold(host: Mapping[str, Any], rounding: float = 0.05) -> bool:
    """Whether a stored record's host figures (``host``, as
    :func:`measure_point` wrote them) pass the run's rule: :func:`judged_pct`
    over the threshold, or exits lost. The figures are stored rounded to
    two decimals: ``rounding`` leaves the sum of three of them that much
    room below the threshold."""
    judged = judged_pct(float(host["worst_pct"]), host.get("bed_wait_pct"),
                        host.get("steal_pct"))
    return bool(host.get("exits_lost")) or judged > float(host["threshold_pct"]) - rounding


def measure_point(study: Any, runner: Any, point: Dict[str, Any], cfg: Any,
                  busy: Optional[BusyHost] = None, late: Optional[Any] = None
                  ) -> Tuple[Dict[str, Any], List[str], str, Dict[str, Any]]:
    """``runner.measure(point)`` with the host's interference over it
    (:mod:`nslab.traffic.interference`): other tasks' run time as a share of all
    CPUs together (each task once: the lab's own tasks are not pinned, so
    they share every CPU with them), and per CPU (an upper bound, for the
    record); and the lab's own threads' wait for a CPU, summed, those that
    ended inside the point included (:mod:`nslab.traffic.exits`), as a share
    of all CPUs. Other tasks took no more from the lab than the smaller of
    the two; where the ended threads are not known, others' share alone is
    judged. Over the configuration's ``host_pct``, the point is measured
    again, up to ``host_reruns`` times (none while ``busy`` says the host is
    busy for good: :class:`BusyHost`); still over, the record says
    ``disturbed`` and reports leave it out, but for the outcomes a busy host
    can move one way only, which a study may keep. Studies that account and
    re-run each trial themselves (RFC 2544: ``Study.reruns_points`` False)
    only record it. With ``late`` (a :class:`nslab.traffic.lateness.Lateness`),
    the record keeps the longest wait past a timer on each CPU over the last
    try (``host.late_ms``)."""
    from ..traffic.exits import Exits
    from ..traffic.interference import (Watch, account, bed_wait_share, counts_waits,
                                        others_share, resolve_ended, steal_share,
                                        top_bed_waits, top_others, worst)
    ncpus = os.cpu_count() or 1
    watch = Watch(range(ncpus), ignore_pids=late.pids if late is not None else ())
    threshold = float(getattr(cfg, "host_pct", 10.0))
    allowed = int(getattr(cfg, "host_reruns", 1)) if study.reruns_points else 0
    held_back = bool(busy is not None and busy.for_good and allowed)
    if held_back:
        allowed = 0
    tries = 0
    while True:
        with Exits() as exits:
            a = watch.snapshot()
            t_a = time.monotonic_ns()
            m, raw, summary = runner.measure(point)
            t_b = time.monotonic_ns()
            b = watch.snapshot()
            ended = exits.drain()
        # each thread that ended inside the point, whose it was: once
        gone = resolve_ended(a, b, ended or ())
        share = others_share(a, b, ncpus, gone)
        # None: the threads that ended inside the point are not known (no
        # taskstats here, or some were lost): others' share alone decides
        waited = (None if ended is None or not counts_waits(a, b, gone) else
                  bed_wait_share(a, b, ncpus, gone))
        # the hypervisor's steal: time withheld from the machine's CPUs while
        # they wanted to run, which tasks' run times leave out (a queued
        # thread's wait takes some in, so adding it may count it twice: an
        # upper bound on what was taken from the lab, not an estimate)
        stolen = steal_share(a, b, ncpus)
        judged = judged_pct(share, waited, stolen)
        # exits the kernel dropped, or that could not be read: neither bound
        # holds their threads (a neighbour's fork storm is what overflows)
        lost = exits.lost
        over = judged > threshold or lost
        if not over or tries >= allowed:
            break
        tries += 1
        log.info("%s: other tasks took %.0f %% of the CPUs (the lab waited for one %s%s%s): "
                 "measuring it again (%d of %d)", study.describe_point(point), share,
                 "for an unknown time" if waited is None else f"{waited:.0f} % of their time",
                 f"; the hypervisor withheld {stolen:.0f} %" if stolen else "",
                 "; exits were lost" if lost else "", tries, allowed)
    found = account(a, b, watch.cpus)
    cpu, _ = worst(found)
    host = {"other_pct": {str(c): round(v.other_pct, 2) for c, v in found.items()},
            "worst_cpu": cpu, "worst_pct": round(share, 2),
            "bed_wait_pct": None if waited is None else round(waited, 2),
            "steal_pct": None if stolen is None else round(stolen, 2),
            "source": "task scan: share of all CPUs", "reruns": tries,
            "disturbed": over and study.reruns_points, "exits_lost": lost,
            "threshold_pct": threshold,
            "top": [[name, round(ms, 1)] for name, ms in top_others(a, b)],
            "bed_waits": [[name, round(ms, 1)] for name, ms in
                          top_bed_waits(a, b, gone)]}
    if late is not None:
        host["late_ms"] = late.window(t_a, t_b)
    if held_back and host["disturbed"]:
        host["busy_for_good"] = True
    if busy is not None and study.reruns_points:
        busy.after(tries, bool(host["disturbed"]))
    return m, raw, summary, host


def round_cost(cost: Dict[str, Any], spent: float, points: int, labs: int,
               once_each: bool = False) -> float:
    """Seconds a round of ``points`` points that builds ``labs`` labs should
    take, from what the rounds so far cost: the mean time of a point, the mean
    time of building, setting up and tearing down a lab (``lab_s`` over
    ``labs``), but for the set-up measured once per run and reused by every
    later lab (``once_s``, which a runner's ``setup()`` reports: the RFC 2544
    calibration), and the rest (judging) per round (``rounds``). Without
    ``lab_s``, the rest of the time spent, ``once_s`` apart, per lab built.
    ``once_each``: the next round measures each point once (the host is busy
    for good, :class:`BusyHost`), so a point costs one measurement (of
    ``measured``, re-runs included), not what points with re-runs cost."""
    if not cost["points"]:
        return spent
    per_point = cost["point_s"] / (max(cost["points"], int(cost.get("measured") or 0))
                                   if once_each else cost["points"])
    once = float(cost.get("once_s") or 0.0)
    if "lab_s" not in cost:  # the rest, per lab built
        return points * per_point + labs * (max(0.0, spent - cost["point_s"] - once)
                                            / max(1, cost["labs"]))
    # labs built (and torn down) apart from the rest (judging), which each round pays
    per_lab = max(0.0, float(cost["lab_s"]) - once) / max(1, cost["labs"])
    per_round = (max(0.0, spent - cost["point_s"] - float(cost["lab_s"]))
                 / max(1, int(cost.get("rounds") or 1)))
    return points * per_point + labs * per_lab + per_round


def config_of_round(cfg: Any, r: int) -> Any:
    """The configuration of sampling round ``r`` (0 first): the study's repeat
    count (``repeat_field``) times ``r + 1``, so each round adds the repeats
    after the ones measured (points are keyed by their repeat index)."""
    if r == 0:
        return cfg
    field = getattr(type(cfg), "repeat_field", "repeat")
    return cfg.model_copy(update={field: getattr(cfg, field) * (r + 1)})


def report_of(study: Any, run_dir: str) -> Any:
    """``study.report(run_dir)`` with every interval at the level the run's
    sampling asks for (1 - alpha / rounds: :func:`nslab.store.stats.sequential`)."""
    from ..store.stats import sequential
    prov = ResultStore.open(run_dir).provenance()
    rounds = (prov.get("sampling") or {}).get("rounds") or \
        (prov.get("config") or {}).get("rounds") or 1
    try:
        rounds = max(1, min(10, int(rounds)))
    except (TypeError, ValueError):
        rounds = 1
    with sequential(rounds):
        return study.report(run_dir)


def _draw(topo: Any, run_dir: str, key: str) -> None:
    """The picture of a lab's topology beside its results (reports embed it);
    skipped, with a note in the log, where Graphviz is missing."""
    from ..store.draw import available, draw
    if not available():
        log.info("no Graphviz: the report has no topology picture (apt install graphviz)")
        return
    try:
        # the topology as data too: reports draw per-point views from it
        write_atomic(os.path.join(run_dir, f"topology-{key}.json"), json.dumps(topo.to_dict()))
        draw(topo, os.path.join(run_dir, f"topology-{key}.svg"))
    except Exception as exc:  # noqa: BLE001 - a picture must not cost a measurement
        log.warning("could not draw the %s topology: %s", key, exc)


def _provenance(store: ResultStore, prov: Dict[str, Any], key: str, info: Dict[str, Any]) -> None:
    """Write the run's provenance, keeping each lab's setup (and earlier ones on
    resume), and what else the run recorded before (e.g. the virtual bed it
    runs in)."""
    old = store.provenance()
    setups = dict(old.get("setups", {}))
    setups[key] = info
    prov["setups"] = setups
    for k, v in old.items():
        prov.setdefault(k, v)
    store.write_provenance(prov)


def results_dir_of(root: str, study: str) -> Optional[str]:
    """The newest run directory of ``study`` under ``root`` (for reproductions)."""
    d = os.path.join(root, study)
    if not os.path.isdir(d):
        return None
    runs = sorted(os.path.join(d, x) for x in os.listdir(d)
                  if os.path.isfile(os.path.join(d, x, "provenance.json")))
    return runs[-1] if runs else None
