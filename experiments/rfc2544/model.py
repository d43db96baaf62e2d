"""The RFC 2544 study's pure logic: theoretical frame rates and the paper's loads."""
from __future__ import annotations

from typing import List, Tuple

from nslab.shaping import frame_rate

#: The paper's Table 3 input rates (frames/s, 64-byte frames).
PAPER_FPS = [100, 1000, 10000, 20000, 40000, 50000, 55556, 58824, 62500, 64516, 65574, 66225,
             66667, 100000]
QUICK_FPS = [1000, 20000, 40000, 55556, 62500, 66667, 100000]
QUICK_LOAD_PCT = [10, 50, 90, 110]
NOMINAL_FPS = 1000


def theory_table(link_bps: float, sizes: List[int]) -> List[Tuple[int, float, float]]:
    """(frame size, max frames/s, max bit/s of frames) on a link of ``link_bps``."""
    return [(s, frame_rate(link_bps, s), frame_rate(link_bps, s) * s * 8) for s in sizes]


def loads(frame: int, line_fps: float, paper_rates: bool, quick: bool,
          loads_pct: List[int]) -> List[float]:
    """The offered loads of the loss/load sweep: the paper's rates for 64-byte
    frames (then past line rate), else percentages of line rate."""
    if frame == 64 and paper_rates:
        return [float(f) for f in (QUICK_FPS if quick else PAPER_FPS)] + [round(1.1 * line_fps, 1)]
    pcts = QUICK_LOAD_PCT if quick else loads_pct
    return [round(line_fps * p / 100.0, 1) for p in pcts]


def backlog_prediction(backlog: int, throughput_fps: float, line_fps: float) -> float:
    """The longest burst at line rate a DUT whose input queue holds ``backlog``
    frames and drains at ``throughput_fps`` takes without loss."""
    return backlog / (1 - throughput_fps / line_fps)
