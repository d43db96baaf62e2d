"""``nslab study check FILE`` (validate and print the plan, no root) and
``nslab study schema`` (the JSON Schema of study files)."""
from __future__ import annotations

import json
from typing import Any, Dict, Tuple

import click

from nslab.cmdline.cliutil import echo, limit_option
from nslab.cmdline.runcli import parse_set_value
from nslab.errors import InputError
from nslab.model.limits import active, fmt


@click.group("study")
def study_group() -> None:
    """Studies written as files: check one, or print their schema."""


@study_group.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--preset", type=click.Choice(["quick", "default", "full"]), default="default",
              show_default=True, help="The preset to plan for.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a configuration field, as on nslab run.")
@limit_option
def check_cmd(path: str, preset: str, sets: Tuple[str, ...]) -> None:
    """Validate a study file without root and print its plan: labs, points and
    the estimated duration, against the limits (counted before anything is
    listed or built; raise one with --limit KEY=N)."""

    from .study import study_class
    cls = study_class(path)
    overrides: Dict[str, Any] = {}
    fields = cls.Config.model_fields
    for item in sets:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_").replace(".", "_")
        if not sep or key not in fields:
            raise InputError(f"--set {item!r}: use KEY=VALUE with KEY one of "
                             f"{', '.join(sorted(fields))}")
        kind = ("list", str) if key not in ("repeat", "duration") else ("scalar", float)
        overrides[key] = parse_set_value(value, kind, key)
    cfg = cls.Config.preset(preset, **overrides)
    labs, points, seconds = cls.estimate(cfg)  # the file's size was checked when it loaded
    study = cls()
    echo(f"{path}: ok: {cls.title}")
    echo(f"preset {preset}: {points} trials of {cfg.duration:g} s on {labs} lab(s), "
         f"about {seconds / 60:.1f} min")
    for key, topo in study.labs(cfg).items():
        n = sum(1 for p in study.points(cfg) if study.lab_key(cfg, p) == key)
        echo(f"  lab {key}: {topo.name}, {len(topo.nodes)} nodes, {len(topo.links)} links: "
             f"{n} trials")
    sweep = cls.sweep(cfg)
    for key, values in sweep.items():
        echo(f"  sweep {key}: {', '.join(map(str, values))}")
    echo(f"  repeat {cfg.repeat}; needs: {', '.join(study.needs(cfg))}")
    suite = cls.loaded.checks
    if suite is not None:
        if suite.staged:
            echo(f"  stages: {len(suite.stages)} (nslab check --checks {path} --stage N on its "
                 "lab; the study runs none)")
        else:
            echo(f"  checks: {len(suite.stage(1).checks)} on each lab before its first trial "
                 f"(nslab check --checks {path} --list)")
    if cfg.rounds > 1:
        from nslab.run.study import config_of_round
        _, most, longest = cls.estimate(config_of_round(cfg, cfg.rounds - 1))
        echo(f"  sampling: up to {cfg.rounds} rounds (intervals at "
             f"{100 - 5 / cfg.rounds:.1f} %), at most {most:,} trials, about "
             f"{longest / 60:.1f} min" + (f", no round begun after {cfg.budget_s:g} s"
                                         if cfg.budget_s else ""))
    from .report import not_planned
    for c in cls.loaded.spec.claims:
        why = not_planned(cfg.model_dump(), c)
        if why:
            echo(f"  not made by this preset: {c.claim!r}: {why}")
    lim = active()
    biggest = max((t.size() for t in study.labs(cfg).values()), default=(0, 0, 0))
    echo(f"  size: {labs} lab(s), {points // cfg.repeat:,} points, {points:,} trials, "
         f"~{fmt('duration', seconds)}; largest lab {biggest[0]:,} nodes, "
         f"{biggest[1]:,} links, {biggest[2]:,} namespaces")
    if cls.loaded.spec.captures:
        from .captures import planned
        n, most = planned(cls.resolved(cfg).spec, cfg.rounds)
        echo(f"  captures: {len(cls.loaded.spec.captures)} asked, in {n:,} trials, at most "
             f"{fmt('captures', most)} (raw/*-capture-*.pcapng)")
    echo(f"  limits: {lim.describe()} (raise with --limit KEY=N)")
    echo(f"run it: nslab run {path}" + (f" --preset {preset}" if preset != "default" else ""))


@study_group.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of study files (docs/study.schema.json)."""
    click.echo(json.dumps(schema(), indent=2))


def schema() -> Dict[str, Any]:
    """Study files' JSON Schema: the model's, with the ``checks:`` and
    ``stages:`` a checks file has (their definitions named ``Check...``)."""
    from nslab.model.checkfile import CHECK_KEYS
    from nslab.model.checks import CheckFile

    from .model import StudyFile
    out = StudyFile.model_json_schema()
    cf = CheckFile.model_json_schema()
    defs = cf.get("$defs", {})
    text = json.dumps({"properties": {k: cf["properties"][k] for k in CHECK_KEYS},
                       "$defs": defs})
    for name in defs:
        text = text.replace(f'"#/$defs/{name}"', f'"#/$defs/Check{name}"')
    checks = json.loads(text)
    out["properties"].update(checks["properties"])
    out.setdefault("$defs", {}).update({f"Check{k}": v for k, v in checks["$defs"].items()})
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["$id"] = "https://nslab.invalid/study.schema.json"
    return out
