"""One name per module: the flat module paths of nslab 0.2 (``nslab.lab``,
``nslab.topo``, ...) no longer import (nslab 0.3 dropped the import hook that
answered for them), the release notes list each with its new name, and
nslab's own code, tests and scripts use the new paths only."""
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTES = os.path.join(ROOT, "docs", "release-notes.md")


def moved():
    """``{old path: new path}`` from the release notes' table."""
    text = open(NOTES, encoding="utf-8").read()
    return dict(re.findall(r"^\| `(nslab\.[a-z_]+)` \| `(nslab\.[a-z_.]+)` \|$", text, re.M))


def _python(code, *flags):
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_the_release_notes_name_every_old_path_s_new_module_and_none_imports():
    table = moved()
    assert len(table) == 57 and table["nslab.lab"] == "nslab.runtime.lab"
    res = _python("import importlib, json, sys\n"
                  f"table = {table!r}\n"
                  "bad = []\n"
                  "for old, new in table.items():\n"
                  "    importlib.import_module(new)\n"
                  "    try:\n"
                  "        importlib.import_module(old)\n"
                  "        bad.append(old)\n"
                  "    except ModuleNotFoundError:\n"
                  "        pass\n"
                  "print(json.dumps(bad))\n"
                  "print(any(type(f).__module__.startswith('nslab') for f in sys.meta_path))")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["[]", "False"]  # no old path, no finder of nslab's own


def test_an_old_path_fails_as_any_missing_module():
    res = _python("import nslab.topo")
    assert res.returncode != 0 and "ModuleNotFoundError: No module named 'nslab.topo'" in res.stderr
    res = subprocess.run([sys.executable, "-I", "-m", "nslab.traffic.probe", "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("usage: python -m nslab.traffic.probe")


def _imports(path):
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            if node.module == "nslab":
                yield from (f"nslab.{a.name}" for a in node.names)


def test_nslab_itself_imports_no_old_path():
    table = moved()
    found = []
    for top in ("nslab", "experiments", "topologies", "ovs", "frr", "tests", "scripts"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
            found += [(os.path.relpath(os.path.join(dirpath, f), ROOT), m) for f in files
                      if f.endswith(".py") for m in _imports(os.path.join(dirpath, f))
                      if m in table]
    assert len(table) >= 50 and found == []
