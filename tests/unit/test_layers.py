"""Layering is checked by a tool (import-linter), not by review: the core imports
no add-on, studies are independent, reports never reach a lab. Every core
module and every study must be named by its contract, so none can slip out."""
import configparser
import os
import subprocess
import sys

from nslab.registry import studies

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _contracts():
    cp = configparser.ConfigParser()
    cp.read(os.path.join(ROOT, ".importlinter"))
    return {s.split(":", 2)[-1]: cp[s] for s in cp.sections() if s.startswith("importlinter:contract")}


def _listed(section, key):
    return {m.strip() for m in section[key].splitlines() if m.strip()}


def test_import_contracts_hold():
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    res = subprocess.run([lint, "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert res.stdout.count("KEPT") == len(_contracts())


def test_every_core_module_is_under_the_core_contract():
    core = {"nslab"} | {f"nslab.{f[:-3]}" for f in os.listdir(os.path.join(ROOT, "nslab"))
                        if f.endswith(".py") and f != "__init__.py"}
    assert _listed(_contracts()["core"], "source_modules") == core


def test_every_registered_study_is_independent_of_the_others():
    modules = _listed(_contracts()["studies"], "modules")
    for name, cls in studies().items():
        package = cls.__module__.rsplit(".", 1)[0]
        assert package in modules, f"study {name} ({package}) is missing from .importlinter"


def test_the_add_ons_import_as_nslab_subpackages_from_a_plain_checkout():
    res = subprocess.run([sys.executable, "-c", "import nslab.ovs, nslab.frr, nslab.topologies, "
                          "nslab.experiments.alias.study; print('ok')"], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert res.stdout.strip() == "ok", res.stderr


def test_pyflakes_finds_no_unused_import_or_undefined_name():
    """Dead imports hide layering (an unused import still counts as an edge) and
    undefined names are crashes waiting for the code path that reaches them."""
    res = subprocess.run([sys.executable, "-m", "pyflakes", "nslab", "ovs", "frr", "topologies",
                          "experiments", "tests", "scripts"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0 and not res.stdout, res.stdout[-3000:] + res.stderr[-1000:]
