"""Packaging: one version (nslab/__init__.py, read by pyproject.toml) and the published
reference data shipped inside the package, never under results/ (which a user empties)."""
import glob
import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata

import nslab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "nslab", "published_data")


def _pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_nslab_version_is_the_package_metadata_version():
    exe = os.path.join(os.path.dirname(sys.executable), "nslab")
    res = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["nslab,", "version", metadata.version("nslab")], \
        "the installed metadata is stale: pip install -e ."
    assert nslab.__version__ == metadata.version("nslab")


def test_the_version_has_one_source():
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nslab.__version__"}
    assert not os.path.exists(os.path.join(ROOT, "setup.py"))


def test_published_data_is_a_package_folder_shipped_as_package_data():
    assert os.path.isdir(DATA) and not os.path.islink(DATA)
    files = sorted(glob.glob(os.path.join(DATA, "*.json")))
    assert files
    shipped = _pyproject()["tool"]["setuptools"]["package-data"]["nslab"]
    assert "published_data/*.json" in shipped


def test_published_data_loads_from_elsewhere_with_no_results_folder(tmp_path):
    """`rm -rf results` must not lose the reference numbers: load every study's data
    from an empty directory, through the installed package, and compare with the files."""
    names = sorted(os.path.basename(f)[:-5] for f in glob.glob(os.path.join(DATA, "*.json")))
    # the three studies that judge against a source's numbers (the file study carries its own)
    assert {"alias", "ecmp", "rfc2544"} <= set(names)
    code = ("import json, sys\n"
            "from nslab.store.published import load_published\n"
            "json.dump({n: load_published(n) for n in sys.argv[1:]}, sys.stdout)\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NSLAB_PUBLISHED", "NSLAB_RESULTS", "PYTHONPATH")}
    res = subprocess.run([sys.executable, "-c", code, *names], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "results").exists()
    got = json.loads(res.stdout)
    for name in names:
        with open(os.path.join(DATA, f"{name}.json"), encoding="utf-8") as f:
            assert got[name] == json.load(f), name
