"""The worker threads that run work inside namespaces (``in_each_namespace``,
and ``run_in_namespaces`` built on it), with entering a namespace replaced by
a record of which one each thread would be in: no root, no namespace."""
import contextlib
import sys
import threading

import pytest

from nslab.errors import CommandError
from nslab.runtime.proc import NetnsJob, Result, in_each_namespace, run_in_namespaces

proc = sys.modules[in_each_namespace.__module__]


@pytest.fixture
def entered(monkeypatch):
    """The namespace each worker thread is in (None: where it started)."""
    where = {}

    @contextlib.contextmanager
    def restored():
        yield "home"
        where[threading.current_thread().name] = None

    def go(netns, home):
        where[threading.current_thread().name] = netns
    monkeypatch.setattr(proc, "_thread_namespace_restored", restored)
    monkeypatch.setattr(proc, "_go", go)
    return where


def test_each_call_runs_in_its_namespace_and_results_keep_the_order_given(entered):
    names = [f"ns{i}" for i in range(20)] + [None]
    seen = in_each_namespace(names, lambda ns: (ns, entered[threading.current_thread().name]),
                             "t", workers=4)
    assert seen == [(ns, ns) for ns in names]
    assert set(entered) <= {f"t-{k}" for k in range(4)} and set(entered.values()) == {None}


def test_after_a_failure_the_earliest_is_raised_and_nothing_more_starts(entered):
    started = []

    def fn(ns):
        started.append(ns)
        if ns in ("b", "c"):
            raise ValueError(ns)
        return ns
    with pytest.raises(ValueError, match="^b$"):
        in_each_namespace(["a", "b", "c", "d"], fn, "t", workers=1)
    assert started == ["a", "b"]


def test_commands_run_in_their_jobs_namespaces_in_job_order(entered, monkeypatch):
    calls = []

    def run(argv, run_id=None, input=None, timeout=60, where=""):
        calls.append((argv, run_id, input, timeout, where,
                      entered[threading.current_thread().name]))
        return Result(list(argv), 0, argv[-1], "")
    monkeypatch.setattr(proc, "run", run)
    jobs = [NetnsJob("n1", ["ip", "a"], "in", "first"), NetnsJob(None, ["tc", "b"]),
            NetnsJob("n2", ["ip", "c"])]
    got = run_in_namespaces(jobs, run_id="r1", workers=1, timeout=5)
    assert [r.stdout for r in got] == ["a", "b", "c"]
    assert calls == [(["ip", "a"], "r1", "in", 5, "first", "n1"),
                     (["tc", "b"], "r1", None, 5, "root", None),
                     (["ip", "c"], "r1", None, 5, "n2", "n2")]
    assert run_in_namespaces([]) == []


def test_a_failed_command_is_raised_by_job_order(entered, monkeypatch):
    def run(argv, **kw):
        if argv[0] == "bad":
            raise CommandError(list(argv), 1, "", "no", kw["where"])
        return Result(list(argv), 0, "", "")
    monkeypatch.setattr(proc, "run", run)
    with pytest.raises(CommandError) as err:
        run_in_namespaces([NetnsJob("n1", ["ok"]), NetnsJob("n2", ["bad"], where="second"),
                           NetnsJob("n3", ["bad"], where="third")], workers=1)
    assert "second" in str(err.value)


def test_a_tools_stray_byte_is_replaced_not_fatal():
    """A tool's output that is not UTF-8 (iperf 2.2.1 printed a 0xa5 in a guest)
    is read with the byte replaced, by run() and by a Process alike."""
    from nslab.runtime.proc import Process, run
    argv = ["printf", "a\\245b\\n"]
    assert run(argv).stdout == "a\ufffdb\n"
    p = Process(argv)
    assert p.wait(timeout=10).stdout == "a\ufffdb\n"
