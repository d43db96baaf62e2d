"""``nslab run STUDY``: one command per registered study, its options generated
from the study's typed configuration, plus ``--preset``, ``--set key=value``,
``--out`` and ``--resume``; and ``nslab report DIR``.

Options keep the spellings the studies had (``--quick`` for ``--preset
quick``, and each study's ``cli_aliases`` such as ``--policy`` for
``policies``). An option not given leaves the preset's value.
"""
from __future__ import annotations

import functools
import json
import os
import typing
from typing import Any, Dict, List, Optional, Tuple, Type

import click
from typing_extensions import Literal

from ..errors import InputError
from ..model.naming import new_run_id
from ..run.registry import studies, study_from_file
from ..run.study import ConfigError, report_of, run_study
from ..runtime.grants import HostGrants
from ..safeio import tree_is_safe
from ..store.results import PROVENANCE, ResultStore, copy_to_report_dir, is_capture
from .cliutil import (RESULTS_ENV, echo, install_signals, limit_param, prescan_limits,
                      setup_logging)
from ..run.registry import is_study_file
from .reproduce import write_report
from ..model.multihost import parse_hosts
from ..run.registry import study


def _unwrap(tp: Any) -> Tuple[Any, bool]:
    """(the underlying type, optional?) of an annotation, through Annotated/Optional."""
    optional = False
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        if origin is typing.Union:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(tp))
            if len(args) == 1:
                tp = args[0]
                continue
        return tp, optional


def _param_type(tp: Any) -> Tuple[str, Any]:
    """('flag'|'list'|'scalar', click type or item type) for a config field."""
    tp, _ = _unwrap(tp)
    origin = typing.get_origin(tp)
    if tp is bool:
        return "flag", None
    if origin in (list, List, tuple):
        item, _ = _unwrap(typing.get_args(tp)[0])
        return "list", item
    if origin is Literal:
        return "scalar", click.Choice([str(a) for a in typing.get_args(tp)])
    if tp in (int, float):
        return "scalar", tp
    return "scalar", str


def _parse_list(text: str, item: Any, name: str) -> List[Any]:
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if typing.get_origin(item) is Literal:
        return parts
    if item in (int, float):
        try:
            return [item(p) for p in parts]
        except ValueError:
            raise InputError(f"--{name}: expected comma-separated numbers, got {text!r}") from None
    return parts


def study_command(study_cls: Type[Any], invoked_as: Optional[str] = None) -> click.Command:
    """The ``nslab run NAME`` (or ``nslab run FILE``) command of one study."""
    cfg_cls = study_cls.Config
    aliases: Dict[str, List[str]] = {}
    for alias, fname in cfg_cls.cli_aliases.items():
        aliases.setdefault(fname, []).append(alias)
    params: List[click.Parameter] = []
    kinds: Dict[str, Tuple[str, Any]] = {}
    for fname, field in cfg_cls.model_fields.items():
        kind, tp = _param_type(field.annotation)
        kinds[fname] = (kind, tp)
        opt = "--" + fname.replace("_", "-")
        names = [opt] + ["--" + a.replace("_", "-") for a in aliases.get(fname, [])]
        default = field.get_default(call_default_factory=True)
        help_text = (field.description or fname.replace("_", " "))
        help_text += f" [default: {','.join(map(str, default)) if isinstance(default, list) else default}]"
        if kind == "flag":
            params.append(click.Option([f"{opt}/--no-{opt[2:]}"] +
                                       [f"{n}/--no-{n[2:]}" for n in names[1:]] + [fname],
                                       default=None, help=help_text))
        elif kind == "list":
            params.append(click.Option(names + [fname], default=None,
                                       help=help_text + " (comma-separated)"))
        else:
            params.append(click.Option(names + [fname], type=tp, default=None, help=help_text))
    presets = list(cfg_cls.presets)
    params += [
        click.Option(["--preset"], type=click.Choice(presets), default=None,
                     help=f"Named settings ({', '.join(presets)}); options given override them."),
        click.Option(["--quick"], is_flag=True, default=False, help="Same as --preset quick."),
        click.Option(["--set", "sets"], multiple=True, metavar="KEY=VALUE",
                     help="Any configuration field, e.g. --set duration=5 (repeatable)."),
        click.Option(["--out"], default=None, help="Results root (default: --results)."),
        click.Option(["--resume"], default=None,
                     help="Continue an interrupted run directory (its own configuration)."),
        click.Option(["--hosts"], default=None, metavar="A,B[,C]",
                     help="Run the study on labs built across these hosts (ssh destinations; "
                          "NAME=ADDRESS gives the address the others reach it at)."),
        click.Option(["--ssh-config"], type=click.Path(exists=True, dir_okay=False), default=None,
                     help="With --hosts: an ssh -F file (default: your own SSH configuration)."),
        click.Option(["--remote-nslab"], default=None, metavar="PATH",
                     help="With --hosts: the nslab command on the hosts."),
        click.Option(["--allow-uplink"], multiple=True, metavar="IFACE",
                     help="Let the study's topology attach this NIC as an uplink (a study file "
                          "or a resumed run may ask; only the command line decides)."),
        click.Option(["--allow-controller"], multiple=True, metavar="TARGET",
                     help="Let an OVS bridge use this OpenFlow controller off the loopback."),
        click.Option(["--allow-force"], is_flag=True, default=False,
                     help="Let an uplink carry the default route or the SSH session."),
        limit_param(),
    ]

    def callback(**kwargs: Any) -> None:
        ctx = click.get_current_context()
        quick = kwargs.pop("quick")
        preset = kwargs.pop("preset") or ("quick" if quick else "default")
        sets, out, resume = kwargs.pop("sets"), kwargs.pop("out"), kwargs.pop("resume")
        across = {k: kwargs.pop(k) for k in ("hosts", "ssh_config", "remote_nslab")}
        allow = (kwargs.pop("allow_uplink"), kwargs.pop("allow_controller"),
                 kwargs.pop("allow_force"))
        overrides: Dict[str, Any] = {}
        for fname, value in kwargs.items():
            if value is None:
                continue
            kind, tp = kinds[fname]
            overrides[fname] = _parse_list(value, tp, fname) if kind == "list" else value
        for item in sets:
            key, sep, value = item.partition("=")
            key = key.strip().replace("-", "_").replace(".", "_")  # sweep keys of study files
            if not sep or key not in kinds:
                raise InputError(f"--set {item!r}: use KEY=VALUE with KEY one of "
                                 f"{', '.join(sorted(kinds))}")
            overrides[key] = parse_set_value(value, kinds[key], key)
        # a study's own --uplink/--force (given here, on the command line) grant themselves
        grants = HostGrants.of(list(allow[0]) + [overrides.get("uplink")], allow[1],
                               allow[2] or overrides.get("force") is True,
                               uplink_flag="--allow-uplink", force_flag="--allow-force")
        run_study_command(ctx, study_cls, preset, overrides, out, resume, grants=grants, **across)

    presets_text = "; ".join(f"{name}: " + (", ".join(f"{k}={v}" for k, v in values.items())
                                              or "the defaults")
                             for name, values in cfg_cls.presets.items())
    return click.Command(invoked_as or study_cls.name, params=params, callback=callback,
                         help=f"{study_cls.title} ({study_cls.source}).\n\nPresets: {presets_text}.",
                         short_help=study_cls.title)


def parse_set_value(text: str, kind: Tuple[str, Any], key: str) -> Any:
    """The value of a ``KEY=VALUE`` option given as ``text``: a list of
    ``kind[1]`` if ``kind[0]`` is ``"list"``, else JSON if it parses, else the
    text itself. ``key`` names the option in errors."""
    if kind[0] == "list":
        return _parse_list(text, kind[1], key)
    try:
        return json.loads(text)
    except ValueError:
        return text


def run_study_command(ctx: click.Context, study_cls: Type[Any], preset: str,
                      overrides: Dict[str, Any], out: Optional[str], resume: Optional[str],
                      hosts: Optional[str] = None, ssh_config: Optional[str] = None,
                      remote_nslab: Optional[str] = None,
                      grants: Optional[HostGrants] = None) -> None:
    """Validate, run with logging and signals set up, keep what was measured on
    Ctrl-C (and say how to resume), then print where the results are."""
    study = study_cls()
    cfg = None if resume else _config(study_cls.Config, preset, overrides)
    if resume and overrides:
        raise InputError("--resume continues a run with its own configuration: give no other option")
    if cfg is not None and getattr(study, "note", None):
        note = study.note(cfg)
        if note:
            echo(note, err=True)
    root = out or ctx.obj.results
    if hosts and cfg is not None:
        study.check_hosts(cfg)  # before its run directory is made (a resumed run: in run_study)
    store = None
    if resume:
        run_id = new_run_id()  # the resumed run's labs
        store_dir = resume
    else:  # the run directory first, made fresh under a free id; the log is named after it
        store = ResultStore.create(root, study.name)
        run_id = store.run_id
        store_dir = store.path
    setup_logging(ctx.obj, run_id)
    install_signals()
    try:
        lab_factory = None
        if hosts:
            from ..hosts.remote import MultiLab
            lab_factory = functools.partial(MultiLab, hosts=parse_hosts(hosts),
                                            ssh_config=ssh_config, remote_nslab=remote_nslab)
        path = run_study(study, cfg, root, run_id=run_id, resume=resume, lab_factory=lab_factory,
                         host_grants=grants if grants is not None else HostGrants(), store=store)
    except KeyboardInterrupt:
        if os.path.isdir(store_dir):
            echo(f"nslab: interrupted; measured points are kept in {store_dir}; resume with "
                 f"`nslab run {getattr(study, 'invocation', '') or study.name} --resume {store_dir}`", err=True)
        raise
    rep = report_of(study, path)  # the run's one render: run_study stores, renders nothing
    echo(f"results: {path}")
    for c in rep.claims:
        echo(f"  [{c.verdict}] {c.claim}: {c.measured}")
    echo(f"report: {rep.files.get('md')} (and .html); plots: {', '.join(rep.figures)}")


def _config(cfg_cls: Type[Any], preset: str, overrides: Dict[str, Any]) -> Any:
    """The preset with the options on top; an invalid option value is named as
    typed: ``--policies/--policy 9: Input should be less than or equal to 3``."""
    try:
        return cfg_cls.preset(preset, **overrides)
    except ConfigError as exc:
        if not exc.loc or exc.loc[0] not in overrides:
            raise
        fname = exc.loc[0]
        names = ["--" + fname.replace("_", "-")] + sorted(
            "--" + a.replace("_", "-") for a, f in cfg_cls.cli_aliases.items() if f == fname)
        value = exc.value if exc.value is not None else overrides[fname]
        if isinstance(value, list):
            value = ",".join(map(str, value))
        raise InputError(f"{'/'.join(names)} {value}: {exc.reason}") from None


class RunGroup(click.Group):
    """``nslab run``: a command per registered study (loaded when asked for)."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(studies())

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if is_study_file(name):
            return study_command(study_from_file(name), name)
        found = studies()
        if name in found:
            return study_command(found[name])
        return None

    def resolve_command(self, ctx: click.Context, args: List[str]
                        ) -> Tuple[Optional[str], Optional[click.Command], List[str]]:
        name = args[0] if args else ""
        # a study file is read (and its size checked) before its command's
        # options are parsed: its --limit must be in force by then
        prescan_limits(args[1:])
        cmd = self.get_command(ctx, name)
        if cmd is None and name and not name.startswith("-"):
            study(name)  # raises InputError listing the registered studies
        return super().resolve_command(ctx, args)


@click.group("run", cls=RunGroup, invoke_without_command=True)
@click.option("--list", "list_", is_flag=True, help="List the registered studies and their presets.")
@click.pass_context
def run_group(ctx: click.Context, list_: bool) -> None:
    """Run a study (a registered one: nslab run --list)."""
    if list_ or ctx.invoked_subcommand is None:
        for name, cls in studies().items():
            echo(f"{name:10} {cls.title} ({cls.source}); presets: {', '.join(cls.Config.presets)}")


def study_of_run(run_dir: str, parent: Optional[str] = None) -> Any:
    """The study class that reads the run directory ``run_dir``: the study file
    the run kept (``study.yaml``), or the registered study its provenance names
    (else ``parent``, the name of the folder the run was found in). Used by
    ``nslab report`` and ``nslab export``."""
    store = ResultStore.open(run_dir)
    kept = os.path.join(run_dir, "study.yaml")  # a study file's run keeps the file it ran
    if os.path.isfile(kept):
        return study_from_file(kept)
    # a registered study's name, never a path (a file would be read from anywhere)
    exp = store.provenance().get("experiment") or parent
    found = studies()
    if not isinstance(exp, str) or exp not in found:
        raise InputError(f"{os.path.join(run_dir, PROVENANCE)}: experiment: "
                         f"{str(exp)[:80]!r} is not a registered study "
                         f"({', '.join(found) or 'none'})")
    return found[exp]


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.pass_context
def report(ctx: click.Context, run_dir: str) -> None:
    """Redraw the report of RUN_DIR from its stored results (no root needed).

    The report is written into RUN_DIR only if nslab can tell the directory is
    its own (no link anywhere in it, everything yours and writable by nobody
    else). Otherwise RUN_DIR's files are copied, without following any link,
    into a new directory under <results>/reports/, and the report goes there.
    """
    if os.path.islink(run_dir.rstrip("/") or "/"):
        raise InputError(f"{run_dir}: a symbolic link; give the run directory itself")
    parent = os.path.basename(os.path.dirname(os.path.abspath(run_dir)))
    why = tree_is_safe(run_dir)
    if why is not None:
        results = ctx.obj.results if ctx.obj is not None else os.environ.get(RESULTS_ENV, "results")
        captures: List[str] = []

        def leave(rel: str) -> bool:  # captures: nothing in a report reads them
            if is_capture(rel):
                captures.append(rel)
                return True
            return False
        out, skipped = copy_to_report_dir(run_dir, results, leave=leave)
        left = f"; left out: {', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}" \
            if skipped else ""
        if captures:
            left += (f"; {len(captures)} packet capture{'s' * (len(captures) > 1)} "
                     f"stay in {run_dir}")
        echo(f"{run_dir} may not be nslab's own ({why}): the report goes to a copy, "
             f"{out}{left}")
        run_dir = out
    if os.path.exists(os.path.join(run_dir, "mode")):  # a `nslab reproduce` directory
        for name, path in write_report(run_dir).items():
            echo(f"{name}: {path}")
        return
    cls = study_of_run(run_dir, parent)
    rep = report_of(cls(), run_dir)
    for name, path in rep.files.items():
        echo(f"{name}: {path}")
