"""Shared plotting helpers: figures are drawn from stored results only (no root).

matplotlib reads a ``matplotlibrc`` from the current directory before any
other (``matplotlib_fname()``: ``./matplotlibrc``, then ``$MATPLOTLIBRC``,
then its configuration directory) when it is imported, and its configuration
directory's ``stylelib/`` when pyplot is. The current directory may be a lab
folder from anyone, and nslab runs as root: a FIFO there hangs the import, a
link to ``/dev/zero`` exhausts memory, and a text file's bad keys are printed
as warnings. So nslab imports matplotlib in one place only,
:func:`import_matplotlib`, where it can read nothing from there.
"""
from __future__ import annotations

import atexit
import io
import os
import shutil
import sys
import tempfile
import threading
from typing import Any, Dict

from ..safeio import write_atomic

_IMPORT_LOCK = threading.Lock()


def import_matplotlib() -> Any:
    """``matplotlib`` on the Agg backend, imported so that it reads nothing
    from the current directory nor from a configuration directory anyone else
    can write: the first import runs with the current directory changed to a
    fresh private directory of this process (``mkdtemp``, mode 0700, empty:
    matplotlib finds no ``matplotlibrc`` there) and ``MPLCONFIGDIR`` set to
    it (its font cache and style library: nothing of the caller's
    ``~/.config`` either); ``MATPLOTLIBRC`` is dropped. The directory goes
    when the process ends. The current directory is changed for the moment
    of the import only: nslab imports matplotlib when it draws, after a
    run's measuring threads have ended."""
    with _IMPORT_LOCK:
        if "matplotlib" not in sys.modules:
            private = tempfile.mkdtemp(prefix="nslab-matplotlib-")
            atexit.register(shutil.rmtree, private, ignore_errors=True)
            os.environ["MPLCONFIGDIR"] = private
            os.environ.pop("MATPLOTLIBRC", None)
            here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.chdir(private)
                import matplotlib
                matplotlib.use("Agg", force=True)
                import matplotlib.pyplot  # its style library, read from `private`
            finally:
                os.fchdir(here)
                os.close(here)
        import matplotlib
        return matplotlib


def pyplot() -> Any:
    """``matplotlib.pyplot`` (:func:`import_matplotlib`) on the Agg backend
    with matplotlib's own defaults: whatever a configuration file changed
    is put back to matplotlib's built-in defaults before any drawing."""
    matplotlib = import_matplotlib()
    matplotlib.use("Agg", force=True)
    matplotlib.rcdefaults()
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig: Any, run_dir: str, name: str, dpi: int = 110) -> Dict[str, str]:
    """Save ``fig`` as ``<name>.png`` and ``<name>.svg`` in ``run_dir``, close it,
    and return ``{"plot_png": path, "plot_svg": path}``."""
    import_matplotlib()
    import matplotlib.pyplot as plt
    fig.tight_layout()
    out = {}
    for ext in ("png", "svg"):
        path = os.path.join(run_dir, f"{name}.{ext}")
        buf = io.BytesIO()  # matplotlib opens a path itself: drawn here, written by rename
        fig.savefig(buf, format=ext, dpi=dpi)
        write_atomic(path, buf.getvalue())
        out[f"plot_{ext}"] = path
    plt.close(fig)
    return out
