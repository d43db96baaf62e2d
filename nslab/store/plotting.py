"""Shared plotting helpers: figures are drawn from stored results only (no root)."""
from __future__ import annotations

import io
import os
from typing import Any, Dict

from ..safeio import write_atomic


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend with matplotlib's own defaults.

    Matplotlib reads a ``matplotlibrc`` from the current directory, which may
    be a lab folder from anyone (its ``backend`` could name a module to load,
    ``text.usetex`` and a LaTeX preamble could read files as root): whatever
    it set is put back to matplotlib's built-in defaults before any drawing.
    """
    import matplotlib
    matplotlib.use("Agg", force=True)
    matplotlib.rcdefaults()
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig: Any, run_dir: str, name: str, dpi: int = 110) -> Dict[str, str]:
    """Save ``fig`` as ``<name>.png`` and ``<name>.svg`` in ``run_dir``, close it,
    and return ``{"plot_png": path, "plot_svg": path}``."""
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
