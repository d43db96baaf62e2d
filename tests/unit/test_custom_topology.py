"""A Python topology runs only when the command line says it is code (issue
51): `--custom FILE NAME`, Mininet's own option, the same on every command
that takes a topology. A name ending in .py is refused in one line and the
file is not run (before, `nslab topo draw lab.py` and `topo export lab.py`
ran it, as root, under help that said "No root"); each command's help says
--custom runs the file as root; a Python error in the file is one line naming
the file and line, plus the log's path (its traceback is there)."""
import os

import pytest

from nslab.cmdline.cli import cli, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASIC = os.path.join(ROOT, "topologies", "basic.py")
COMMANDS = {"check": [], "draw": ["-o", "lab.dot"], "export": [], "up": ["--for", "0"]}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder with a Python topology that leaves a marker when it runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NSLAB_RESULTS", raising=False)
    marker = tmp_path / "ran"
    (tmp_path / "lab.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        f"exec(open({BASIC!r}).read())  # topologies/basic.py's topos\n")
    return tmp_path, marker


def one_line(capsys, rc):
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("spec", ["lab.py", "lab.py:nslab_pair"])
def test_a_python_file_named_as_a_topology_is_not_run(folder, capsys, monkeypatch, command,
                                                       spec):
    tmp_path, marker = folder
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # `up` refuses before it needs root
    err = one_line(capsys, main(["topo", command, spec, *COMMANDS[command]]))
    assert "lab.py: a Python topology is a program" in err and "--custom lab.py" in err
    assert not marker.exists(), "the file ran"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_that_takes_a_topology_says_custom_runs_the_file_as_root(command):
    import click
    cmd = cli.commands["topo"].commands[command]
    with click.Context(cmd, info_name=command) as ctx:
        text = " ".join(cmd.get_help(ctx).split())
    assert "--custom FILE" in text and "as root" in text
    assert "No root." not in text


def test_check_refuses_without_suggesting_another_command_that_would_run_it(folder, capsys):
    err = one_line(capsys, main(["topo", "check", "lab.py"]))
    assert "topo draw" not in err


def test_custom_runs_the_file_and_takes_the_topology_named(folder, capsys):
    pytest.importorskip("mininet.topo")
    tmp_path, marker = folder
    assert main(["topo", "check", "--custom", "lab.py", "nslab_pair"]) == 0
    assert marker.exists()
    assert "2 nodes, 1 links" in capsys.readouterr().out


@pytest.mark.parametrize("body, line, says", [
    ("x = 1\ny = x / 0\n", 2, "ZeroDivisionError: division by zero"),
    ("def f(:\n    pass\n", 1, "SyntaxError"),
    ("import sys\n\nsys.exit(3)\n", 3, "SystemExit: 3"),
    ("topos = {'t': lambda: 1 / 0}\n", 1, "ZeroDivisionError"),
    ("raise RuntimeError('first line\\nsecond line')\n", 1, "RuntimeError: first line"),
])
def test_a_python_error_in_a_custom_file_is_one_line_with_the_log(folder, capsys, body, line,
                                                                   says):
    tmp_path, _ = folder
    (tmp_path / "broken.py").write_text(body)
    err = one_line(capsys, main(["topo", "draw", "--custom", "broken.py", "t", "-o", "x.dot"]))
    assert f"broken.py:{line}: {says}" in err, err
    assert "second line" not in err
    log = err.rsplit("(log: ", 1)[1].rstrip(")")
    assert os.path.isfile(log)
    assert "Traceback" in open(log).read()


def test_a_custom_file_writes_no_bytecode_beside_itself(folder, capsys):
    pytest.importorskip("mininet.topo")
    tmp_path, _ = folder
    assert main(["topo", "check", "--custom", "lab.py", "nslab_pair"]) == 0
    assert not (tmp_path / "__pycache__").exists()
