"""The module paths of nslab 0.2 (``nslab.lab``, ``nslab.topo``, ...) still import
for one release, as the very module at the new path, with a DeprecationWarning;
nslab's own code and tests use the new paths only."""
import ast
import os
import subprocess
import sys

from nslab._compat import MOVED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code, *flags):
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_an_old_path_is_the_new_module_and_warns_once():
    res = _python("import warnings\n"
                  "with warnings.catch_warnings(record=True) as w:\n"
                  "    warnings.simplefilter('always')\n"
                  "    import nslab.lab, nslab.runtime.lab\n"
                  "    from nslab.study import Study\n"
                  "    from nslab import topo\n"
                  "from unittest import mock\n"
                  "assert nslab.lab is nslab.runtime.lab\n"
                  "assert nslab.lab.__spec__.name == 'nslab.runtime.lab'\n"
                  "assert Study.__module__ == 'nslab.run.study' and topo.__name__ == 'nslab.model.topo'\n"
                  "with mock.patch('nslab.lab.new_run_id', lambda: 'patched'):\n"
                  "    assert nslab.runtime.lab.new_run_id() == 'patched'\n"
                  "for x in w: print(x.category.__name__, x.filename, x.message)\n")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 3 and all(l.startswith("DeprecationWarning <string> nslab.") for l in lines)
    assert "nslab.lab is deprecated: import nslab.runtime.lab" in lines[0]


def test_the_warning_is_an_error_where_warnings_are():
    res = _python("import nslab.stats", "-W", "error::DeprecationWarning")
    assert res.returncode != 0 and "nslab.stats is deprecated: import nslab.store.stats" in res.stderr


def test_every_old_path_still_imports():
    res = _python("import importlib, warnings\n"
                  "from nslab._compat import MOVED\n"
                  "warnings.simplefilter('ignore')\n"
                  "for old, new in MOVED.items():\n"
                  "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
                  "print(len(MOVED))")
    assert res.returncode == 0 and int(res.stdout) == len(MOVED) >= 50, res.stderr


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
    found = []
    for top in ("nslab", "experiments", "topologies", "ovs", "frr", "tests", "scripts"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
            found += [(os.path.relpath(os.path.join(dirpath, f), ROOT), m) for f in files
                      if f.endswith(".py") for m in _imports(os.path.join(dirpath, f))
                      if m in MOVED and f != "test_old_paths.py"]
    assert len(MOVED) >= 50 and found == []


def test_python_dash_m_with_an_old_path_runs_the_new_module():
    """Runners of third-party studies start ``python -I -m nslab.probe`` in a node."""
    res = subprocess.run([sys.executable, "-I", "-W", "always", "-m", "nslab.probe", "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: python -m nslab.traffic.probe")
    assert "python -m nslab.probe is deprecated: use python -m nslab.traffic.probe" in res.stderr
