"""The documentation: the README as a landing page, the MkDocs site built with
--strict (a broken link or anchor fails), and the reference pages generated
from the JSON Schemas."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
HOOKS = os.path.join(ROOT, "scripts", "mkdocs_hooks.py")

needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                  reason="mkdocs is not installed (pip install -e '.[test]')")


def _schema_reference():
    spec = importlib.util.spec_from_file_location(
        "schema_reference", os.path.join(ROOT, "scripts", "schema_reference.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _build(config, site):
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", config, "-d", site],
                          capture_output=True, text=True, timeout=120)


# -- the README --------------------------------------------------------------------------
def test_the_readme_opens_with_the_two_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines()]
    assert commands == ["make demo", "make test"]   # .ci/run runs the README's test command


def test_the_readme_is_a_landing_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= 250, "the README is the door: move detail into docs/"


# -- generated pages ---------------------------------------------------------------------
def test_the_reference_pages_are_the_schemas():
    mod = _schema_reference()
    for name, text in mod.expected(DOCS).items():
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            assert f.read() == text, \
                f"docs/{name} is stale: .venv/bin/python scripts/schema_reference.py --write"


def test_the_reference_names_every_key_of_the_topology_schema():
    mod = _schema_reference()
    schema = json.loads(mod.topology_schema_text())
    page = mod.reference(schema, "t")
    for name, sub in [("", schema)] + list(schema["$defs"].items()):
        if name:
            assert f"## {name}\n" in page
        for key in sub.get("properties", {}):
            assert f"| `{key}` |" in page, (name, key)


# -- the site ----------------------------------------------------------------------------
@needs_mkdocs
def test_the_site_builds_strict(tmp_path):
    site = str(tmp_path / "site")
    out = _build(os.path.join(ROOT, "mkdocs.yml"), site)
    assert out.returncode == 0, out.stdout + out.stderr
    with open(os.path.join(site, "index.html"), encoding="utf-8") as f:
        home = f.read()
    assert "make demo" in home and "make test" in home       # the README is the home page
    assert 'src="img/clos.svg"' in home                       # its links rewritten for the site
    assert os.path.isfile(os.path.join(site, "repo", "studies", "ecmp-failover.yaml"))
    assert not os.path.exists(os.path.join(site, "answers"))  # answer keys stay out


def _tiny_project(tmp_path, readme, page):
    """A copy of the site's configuration over a two-page project."""
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config.update(hooks=[HOOKS], nav=[{"Home": "index.md"}, {"Page": "page.md"}])
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page)
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "data.yaml").write_text("a: 1\n")
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@needs_mkdocs
@pytest.mark.parametrize("readme, page, broken", [
    ("# t\n\n[gone](docs/missing.md)\n", "# p\n", "missing.md"),
    ("# t\n\n[p](docs/page.md#nowhere)\n", "# p\n", "nowhere"),
    ("# t\n", "# p\n\n[a file](../nothere.yaml)\n", "nothere.yaml"),
])
def test_a_broken_link_fails_the_build(tmp_path, readme, page, broken):
    config = _tiny_project(tmp_path, readme, page)
    out = _build(config, str(tmp_path / "site"))
    assert out.returncode != 0
    assert broken in out.stdout + out.stderr


@needs_mkdocs
def test_a_link_to_a_repository_file_is_carried_into_the_site(tmp_path):
    config = _tiny_project(tmp_path, "# t\n\n[data](data.yaml), [p](docs/page.md)\n",
                           "# p\n\n[data](../data.yaml)\n")
    site = tmp_path / "site"
    out = _build(config, str(site))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (site / "repo" / "data.yaml").read_text() == "a: 1\n"
    assert 'href="repo/data.yaml"' in (site / "page.html").read_text()
    assert 'href="repo/data.yaml"' in (site / "index.html").read_text()
    assert 'href="page.html"' in (site / "index.html").read_text()
