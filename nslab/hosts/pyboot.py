"""Start a module in a guest without ``site``'s start-up.

    python -I -S .../nslab/hosts/pyboot.py MODULE [ARG ...]

runs ``python -I -m MODULE ARG ...`` with the same packages found, less the
work of ``site``: under QEMU's TCG, and with every file read from the host
over 9p, ``site`` alone (the venv's and the system's ``.pth`` files, which
import an editable install's finder and what it needs: pathlib,
importlib.resources, tempfile...) cost more than the rest of the
interpreter's start. ``sys.path`` becomes the standard library, the folder
this ``nslab`` is in, the venv's site-packages and, where the venv includes
them, the system's (as ``site`` orders them). Nothing is taken from the
environment or the current folder (``-I``); no ``.pth`` file runs.
"""
import os
import runpy
import site
import sys


def _venv() -> "str | None":
    """The venv this interpreter was started from (its ``pyvenv.cfg``), if any."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    return root if os.path.isfile(os.path.join(root, "pyvenv.cfg")) else None


def venv_config(venv: str) -> "dict[str, str]":
    """``venv``'s ``pyvenv.cfg`` as ``{key: value}``, keys in lower case
    (raises OSError if it cannot be read)."""
    out: "dict[str, str]" = {}
    with open(os.path.join(venv, "pyvenv.cfg")) as f:
        for line in f:
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip().lower()] = value.strip()
    return out


def _system_too(venv: str) -> bool:
    return venv_config(venv).get("include-system-site-packages", "").lower() == "true"


def search_path() -> "list[str]":
    """The folders to add to ``sys.path``, in ``site``'s order, that exist."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    dirs = [here]
    venv = _venv()
    if venv is not None:  # the layout the venv module makes (Debian's site says dist-packages)
        dirs.append(os.path.join(venv, "lib", "python%d.%d" % sys.version_info[:2],
                                 "site-packages"))
    if venv is None or _system_too(venv):
        dirs += site.getsitepackages([sys.base_prefix])
    out: "list[str]" = []
    for d in dirs:
        if d not in out and d not in sys.path and os.path.isdir(d):
            out.append(d)
    return out


def main() -> None:
    if len(sys.argv) < 2:
        sys.stderr.write("usage: python -I -S pyboot.py MODULE [ARG ...]\n")
        raise SystemExit(2)
    sys.path.extend(search_path())
    module = sys.argv[1]
    sys.argv = [module] + sys.argv[2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
