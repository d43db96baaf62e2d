"""Bad input: one line naming the problem, a non-zero exit, no traceback."""
import pytest

from nslab.cmdline.cli import main


@pytest.mark.parametrize("args, message", [
    (["topo", "up", "nosuch"], "unknown topology 'nosuch'"),
    (["topo", "up", "single", "--bw", "10 parsecs"], "bad rate '10 parsecs'"),
    (["topo", "up", "single", "--k", "three"], "expected an integer"),
    (["topo", "up", "single", "--colour", "red"], "unknown option --colour"),
    (["topo", "up", "/nonexistent.yaml"], "cannot read"),
    (["clean", "--run", "bad;id"], "bad run id"),
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, capsys, args, message):
    rc = main(["--results", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert rc != 0
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_malformed_yaml_from_the_cli(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text("nodes:\n  h1: {ip: 10.0.0.1/24\n")
    rc = main(["--results", str(tmp_path), "topo", "up", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and "malformed YAML" in err and f"{p}:" in err


def test_not_root_is_refused_before_anything_is_built(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    from nslab.runtime import caps
    caps.probe.cache_clear()
    try:
        rc = main(["--results", str(tmp_path), "topo", "up", "single", "--for", "0"])
    finally:
        caps.probe.cache_clear()
    err = capsys.readouterr().err
    assert rc == 1 and "needs root" in err


@pytest.mark.parametrize("torn, says", [
    ([], "nslab: interrupted\n"),
    (["nl1a2b"], "nslab: interrupted; the lab was torn down\n"),
    (["nl1a2b", "nl3c4d"], "nslab: interrupted; its 2 labs were torn down\n"),
])
def test_an_interrupted_command_says_a_lab_was_torn_down_only_if_one_was(monkeypatch, capsys,
                                                                          torn, says):
    # a second Ctrl-C while `nslab capture` stops dumpcap said "the lab was
    # torn down" of a lab it never owned
    import nslab.cmdline.cli as cli_mod
    from nslab.runtime import lab

    class Interrupted:
        def main(self, **kw):
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_mod, "_register_plugins", lambda: None)
    monkeypatch.setattr(cli_mod, "cli", Interrupted())
    monkeypatch.setattr(lab, "TORN_DOWN", list(torn))
    assert main(["capture", "h1"]) == 130
    assert capsys.readouterr().err == says


@pytest.mark.parametrize("code", [0, 1, 2])
def test_a_command_exit_code_is_the_process_exit_code(monkeypatch, tmp_path, code):
    """`nslab check` ends with ctx.exit(1) when a check failed: the process
    exits 1 (click, run without standalone mode, returns that code instead of
    raising it, and a CI job read 0 for a failed check)."""
    from nslab.cmdline import checkcli

    monkeypatch.setattr(checkcli, "_check", lambda *a: code)
    assert main(["--results", str(tmp_path), "check", "nl1a2b"]) == code
