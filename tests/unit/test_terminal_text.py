"""What came from a file, a file name, another process or a library's message
reaches the terminal with its control characters escaped (issue 51): one
helper (nslab.safeio.printable) for every command's output, its error line,
its log handlers and Python's warnings. Before, a file name in `nslab
report`'s "left out:" list, a YAML key in an error line's field path, a
process name in `nslab clean --dry-run` and matplotlib's warnings could
retitle the terminal, clear it or print a fake line."""
import json
import logging
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nslab.cmdline import cli as cli_mod
from nslab.cmdline.cli import main
from nslab.cmdline.cliutil import Ctx, setup_logging, terminal_safety
from nslab.safeio import printable

#: Text as a hostile folder writes it: mostly the characters a terminal acts on.
NASTY = st.text(st.one_of(st.sampled_from("\x1b\x07\x08\r\n\t\x9b\x85\u202e\u2028\x00[]0;"),
                          st.characters(blacklist_categories=("Cs",))), max_size=30)


def safe_on_a_terminal(text):
    """Nothing a terminal would act on: only printable characters and line breaks."""
    return all(c.isprintable() or c == "\n" for c in text)


@given(st.text())
def test_printable_leaves_nothing_a_terminal_acts_on(text):
    out = printable(text)
    assert out.isprintable()
    assert printable(text, lines=True).replace("\n", "").replace("\t", "").isprintable()
    if text.isprintable():
        assert out == text


@given(NASTY)
def test_printable_shows_every_character_it_escapes(text):
    out = printable(text)
    for ch in set(text) - {"\\"}:
        if not ch.isprintable():
            assert ch not in out
            assert f"{ord(ch):02x}" in out


# -- file names in `nslab report`'s "left out:" list --------------------------------------
FILE_NAMES = st.text(st.one_of(st.sampled_from("\x1b\x07\r\n\t\x9b\u202e]0;[2J"),
                               st.characters(blacklist_categories=("Cs",),
                                             blacklist_characters="/\x00")),
                     min_size=1, max_size=20).filter(lambda n: n not in (".", ".."))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=FILE_NAMES)
def test_a_file_name_in_a_results_folder_is_escaped_in_report(tmp_path_factory, capsys,
                                                               monkeypatch, name):
    folder = tmp_path_factory.mktemp("lab")
    monkeypatch.chdir(folder)
    run = folder / "run"
    run.mkdir()
    (run / "provenance.json").write_text(json.dumps({"experiment": "nosuch"}))
    try:
        os.symlink("/etc/hostname", run / name)  # left out of the copy, and named
    except (OSError, UnicodeEncodeError):
        return  # a name this file system will not hold
    main(["report", str(run)])
    out, err = capsys.readouterr()
    assert "may not be nslab's own" in out and "left out:" in out
    assert safe_on_a_terminal(out) and safe_on_a_terminal(err)
    assert len(err.strip().splitlines()) == 1  # the study is unknown: one error line


# -- YAML keys in an error line's field path ----------------------------------------------
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=NASTY.filter(bool))
def test_a_yaml_key_in_an_error_line_is_escaped(tmp_path_factory, capsys, key):
    folder = tmp_path_factory.mktemp("lab")
    quoted = json.dumps(key)  # a YAML double-quoted scalar: escapes become the characters
    topo = folder / "lab.yaml"
    topo.write_text(f"nodes:\n  {quoted}: {{}}\n  h2: {{}}\nlinks: [[h2, h2]]\n")
    study = folder / "study.yaml"
    study.write_text(f"name: s\ntitle: t\n{quoted}: 1\n")
    for args in (["topo", "check", str(topo)], ["study", "check", str(study)]):
        rc = main(["--results", str(folder), *args])
        out, err = capsys.readouterr()
        assert rc == 2, err
        assert err.startswith("nslab: error: ") and err.endswith("\n")
        assert len(err.splitlines()) == 1 and safe_on_a_terminal(err), repr(err)


# -- a process name in `nslab clean --dry-run` --------------------------------------------
def test_a_process_name_in_clean_dry_run_is_escaped(monkeypatch, capsys):
    evil = "\x1b]0;owned\x07\x1b[2J\rOK nothing to clean"
    monkeypatch.setattr(cli_mod.caps, "require_root", lambda what: None)
    monkeypatch.setattr(cli_mod, "do_clean", lambda run_id, dry_run, force: {
        "nl1a2b": [f"process 4242 ({evil})"]})
    assert main(["clean", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert safe_on_a_terminal(out)
    assert "process 4242 (\\x1b]0;owned\\x07\\x1b[2J\\x0dOK nothing to clean)" in out


# -- a tool's version string in `nslab doctor` --------------------------------------------
def test_a_tools_version_string_in_doctor_is_escaped(monkeypatch, capsys):
    """`nslab doctor` prints what tools say of themselves (and the system's
    os-release): another program's words, escaped like a file's."""
    evil = "8.4\x1b]0;owned\x07\x1b[2J\rOK"
    monkeypatch.setattr(cli_mod.caps, "probe", lambda: {})
    monkeypatch.setattr(cli_mod.caps, "versions", lambda: {"frr": evil})
    monkeypatch.setenv("COLUMNS", "200")  # the table's cell on one line
    main(["doctor"])
    out = capsys.readouterr().out
    assert safe_on_a_terminal(out)
    assert "8.4\\x1b]0;owned\\x07" in out


# -- warnings and log records -------------------------------------------------------------
def test_warnings_and_stray_log_records_are_escaped_in_a_command(capsys):
    with terminal_safety():
        warnings.warn_explicit("Glyph 27 (\x1b) missing from font(s) DejaVu Sans.",
                               UserWarning, "/nonexistent/matplotlib/text.py", 1)
        # a record no handler takes (before setup_logging) goes to lastResort
        logging.lastResort.handle(logging.makeLogRecord(
            {"name": "matplotlib", "levelno": logging.WARNING, "levelname": "WARNING",
             "msg": "Bad key %s in file %s", "args": ("\x1b]0;x\x07", "matplotlibrc")}))
    err = capsys.readouterr().err
    assert "Glyph 27 (\\x1b) missing" in err and "Bad key \\x1b]0;x\\x07 in file" in err
    assert safe_on_a_terminal(err)


def test_the_warning_hooks_are_put_back():
    shown, last = warnings.showwarning, logging.lastResort
    with terminal_safety():
        pass
    assert warnings.showwarning is shown and logging.lastResort is last


def test_the_log_handlers_escape_what_they_write(tmp_path, capsys):
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        path = setup_logging(Ctx(str(tmp_path), 0), "nl0test")
        logging.getLogger("nslab.test").warning("name \x1b[31mred\x1b[0m\nsecond line")
        for h in root.handlers[len(before):]:
            h.flush()
    finally:
        for h in root.handlers[len(before):]:
            root.removeHandler(h)
            h.close()
    err = capsys.readouterr().err
    assert "name \\x1b[31mred\\x1b[0m" in err and safe_on_a_terminal(err)
    with open(path) as f:
        assert "\x1b" not in f.read()


@pytest.mark.parametrize("message", ["one\x1b[2Jline", "two\nlines", "bidi \u202eevil"])
def test_the_error_line_is_one_escaped_line(monkeypatch, capsys, message):
    from nslab.errors import InputError

    class Failing:
        def main(self, **kw):
            raise InputError(message)

    monkeypatch.setattr(cli_mod, "_register_plugins", lambda: None)
    monkeypatch.setattr(cli_mod, "cli", Failing())
    assert main([]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and safe_on_a_terminal(err), repr(err)
