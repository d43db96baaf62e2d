"""Shared plotting helpers: figures are drawn from stored results only (no root)."""
from __future__ import annotations

import io
import os
from typing import Any, Dict

from .safeio import write_atomic


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
