"""The progress line's estimate of the time left: each kind of point at its
own mean (a throughput search takes a minute, a latency trial seconds)."""
from nslab.run.study import Progress
from nslab.experiments.rfc2544.study import Rfc2544Study


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lefts(points, seconds, kind_of, capsys, with_kinds=True):
    clock = Clock()
    prog = Progress(len(points), clock=clock,
                    kinds=[kind_of(p) for p in points] if with_kinds else None)
    for p, s in zip(points, seconds):
        clock.now += s
        prog.point(" ".join(f"{k}={v}" for k, v in p.items()), "done",
                   kind_of(p) if with_kinds else None)
    lines = capsys.readouterr().err.splitlines()
    return [float(line.rsplit("(~", 1)[1].split(" s left")[0]) for line in lines]


#: The quick preset's eight points, in the order the study measures them, and
#: durations of their order of magnitude (a search ~30 times a latency trial).
QUICK = [({"dut": d, "frame": 64, "test": t, "repeat": r}, s)
         for d in ("bridge", "router")
         for t, r, s in (("throughput", 0, 60), ("latency", 0, 2), ("loss", 0, 10),
                         ("loss", 1, 10))]


def test_each_kind_of_point_is_estimated_at_its_own_mean(capsys):
    study = Rfc2544Study()
    points, seconds = zip(*QUICK)
    lefts = _lefts(points, seconds, study.cost_kind, capsys)
    # after the bridge's four, the router's search is estimated at the
    # bridge's, its latency and loss trials at theirs: 60 + 2 + 10 + 10
    assert lefts[3] == 82
    # after the router's search, what is left is a latency and two loss trials
    assert lefts[4] == 22 and lefts[5] == 20 and lefts[6] == 10 and lefts[7] == 0
    # the mean of all points (every point one kind) had said 85 and 48 there
    flat = _lefts(points, seconds, study.cost_kind, capsys, with_kinds=False)
    assert flat[4] == 85 and flat[5] == 48 and flat[7] == 0


def test_a_kind_not_yet_measured_is_estimated_at_the_mean_of_all(capsys):
    points = [{"test": "a"}, {"test": "b"}, {"test": "b"}]
    lefts = _lefts(points, [30, 10, 10], lambda p: p["test"], capsys)
    assert lefts == [60, 10, 0]  # b unknown: 2 x 30; then b at 10
