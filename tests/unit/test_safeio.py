"""Root never writes through a link a lab folder ships, and run directories are
fresh (issue 31). Every test runs in its own folder (``chdir``), so the links
it makes lie inside the current directory, where no link is trusted."""
import json
import os
import shutil

import pytest

from nslab.store import results as results_mod
from nslab import safeio
from nslab.cmdline.cli import main
from nslab.errors import InputError
from nslab.store.results import ResultStore
from nslab.safeio import (UnsafePathError, copy_file, copy_tree, make_dirs, make_fresh_dir,
                          open_append, open_new, tree_is_safe, write_atomic)

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
PRECIOUS = "precious: must not change\n"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A lab folder as the current directory, and a file outside it."""
    lab = tmp_path / "lab"
    lab.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text(PRECIOUS)
    monkeypatch.chdir(lab)
    monkeypatch.delenv("NSLAB_RESULTS", raising=False)
    return lab, outside


def _writers(path):
    return {"open_new": lambda: open_new(path).close(),
            "open_new(replace)": lambda: open_new(path, replace=True).close(),
            "open_append": lambda: open_append(path).close(),
            "write_atomic": lambda: write_atomic(path, "x"),
            "make_dirs": lambda: make_dirs(path),
            "make_fresh_dir": lambda: make_fresh_dir(path)}


@pytest.mark.parametrize("writer", list(_writers("x")))
def test_a_link_to_a_directory_in_the_path_is_refused(folder, tmp_path, writer):
    lab, _ = folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, lab / "results")
    with pytest.raises(UnsafePathError, match="results is a symbolic link"):
        _writers("results/alias/nl0001/f")[writer]()
    assert os.listdir(elsewhere) == []


def test_a_link_as_the_file_itself_is_never_written_through(folder):
    lab, outside = folder
    os.symlink(outside, lab / "records.jsonl")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_append("records.jsonl")
    with pytest.raises(FileExistsError):  # a new file must be new: a link is not reused
        open_new("records.jsonl")
    assert outside.read_text() == PRECIOUS


def test_append_refuses_a_hard_link(folder):
    lab, outside = folder
    os.link(outside, lab / "records.jsonl")
    with pytest.raises(UnsafePathError, match="2 links"):
        open_append("records.jsonl")
    assert outside.read_text() == PRECIOUS


def test_atomic_write_replaces_a_link_and_leaves_its_target_alone(folder):
    lab, outside = folder
    os.symlink(outside, lab / "report.md")
    write_atomic("report.md", "# report\n")
    assert not os.path.islink("report.md")
    assert open("report.md").read() == "# report\n"
    assert outside.read_text() == PRECIOUS
    assert [f for f in os.listdir(lab) if f.startswith(".nslab-")] == []  # no temporary left


def test_open_new_with_replace_removes_a_link_instead_of_following_it(folder):
    lab, outside = folder
    os.symlink(outside, lab / "out.log")
    with open_new("out.log", replace=True) as f:
        f.write("mine\n")
    assert open("out.log").read() == "mine\n" and not os.path.islink("out.log")
    assert outside.read_text() == PRECIOUS


def test_make_fresh_dir_never_reuses_a_directory_or_a_link(folder, tmp_path):
    lab, _ = folder
    make_fresh_dir("results/alias/nl0001")
    with pytest.raises(FileExistsError):
        make_fresh_dir("results/alias/nl0001")
    os.symlink(tmp_path, lab / "results" / "alias" / "nl0002")
    with pytest.raises(FileExistsError):
        make_fresh_dir("results/alias/nl0002")
    assert os.path.isdir("results/alias/nl0001") and not os.path.islink("results/alias/nl0001")


def test_copy_tree_copies_files_and_leaves_out_links_fifos_and_hard_links(folder):
    lab, outside = folder
    src = lab / "run"
    (src / "raw").mkdir(parents=True)
    (src / "records.jsonl").write_text("{}\n")
    (src / "raw" / "a.txt").write_text("a")
    os.symlink(outside, src / "report.md")
    os.symlink(outside.parent, src / "linkdir")
    os.mkfifo(src / "raw" / "fifo")
    os.link(outside, src / "raw" / "hard.txt")
    dst = make_fresh_dir("copy")
    skipped = copy_tree(str(src), dst)
    assert sorted(skipped) == ["linkdir", "raw/fifo", "raw/hard.txt", "report.md"]
    assert sorted(os.listdir(dst)) == ["raw", "records.jsonl"]
    assert os.listdir(os.path.join(dst, "raw")) == ["a.txt"]
    assert open(os.path.join(dst, "raw", "a.txt")).read() == "a"


def test_copy_tree_stops_at_its_limit(folder):
    lab, _ = folder
    (lab / "run").mkdir()
    (lab / "run" / "big").write_bytes(b"x" * 100)
    with pytest.raises(InputError, match="more than 50 bytes"):
        copy_tree(str(lab / "run"), make_fresh_dir("copy"), limit=50)


def test_copy_tree_holds_one_chunk_in_memory_whatever_a_files_size(folder):
    """A foreign folder is copied before its records are read with their own
    bound: a 64 MiB file (sparse, so cheap to make) is copied whole while
    Python holds a few chunks at most, not the file."""
    import tracemalloc
    lab, _ = folder
    (lab / "run").mkdir()
    size = 64 * safeio.COPY_CHUNK
    with open(lab / "run" / "records.jsonl", "wb") as f:
        f.truncate(size)
    dst = make_fresh_dir("copy")
    tracemalloc.start()
    try:
        copy_tree(str(lab / "run"), dst)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert os.path.getsize(os.path.join(dst, "records.jsonl")) == size
    assert peak < 4 * safeio.COPY_CHUNK, peak


def test_copy_file_refuses_a_link_source(folder):
    lab, outside = folder
    os.symlink(outside, lab / "zebra.log")
    with pytest.raises(UnsafePathError):
        copy_file("zebra.log", "kept.log")
    assert not os.path.exists("kept.log")
    (lab / "bgpd.log").write_text("log\n")
    assert copy_file("bgpd.log", "kept.log") == 4 and open("kept.log").read() == "log\n"


def test_tree_is_safe_names_what_is_wrong_in_one_line(folder):
    lab, outside = folder
    run = lab / "run"
    (run / "raw").mkdir(parents=True)
    (run / "records.jsonl").write_text("{}\n")
    assert tree_is_safe(str(run)) is None
    (run / "records.jsonl").chmod(0o666)
    assert "writable by others" in tree_is_safe(str(run))
    (run / "records.jsonl").chmod(0o644)
    os.symlink(outside, run / "raw" / "x\nfake line")
    why = tree_is_safe(str(run))
    assert "is a symbolic link" in why and "\n" not in why


# -- run directories -------------------------------------------------------------------
def _ids(monkeypatch, ids):
    it = iter(ids)
    monkeypatch.setattr(results_mod, "new_run_id", lambda: next(it))


def test_a_new_run_skips_an_id_whose_directory_exists(folder, tmp_path, monkeypatch):
    lab, _ = folder
    older = ResultStore.create("results", "alias", "nl0001")
    older.append({"n": 1}, {"mbps": 1.0})
    os.symlink(tmp_path, lab / "results" / "alias" / "nl0002")  # placed by the folder
    _ids(monkeypatch, ["nl0001", "nl0002", "nl0003"])
    new = ResultStore.create("results", "alias")
    assert new.run_id == "nl0003" and new.path == os.path.join("results", "alias", "nl0003")
    new.append({"n": 2}, {"mbps": 2.0})
    assert [r["params"] for r in older.records()] == [{"n": 1}]
    assert [r["params"] for r in new.records()] == [{"n": 2}]
    assert sorted(os.listdir(lab / "results" / "alias" / "nl0003")) == ["raw", "records.jsonl"]
    assert not os.path.exists(tmp_path / "records.jsonl")


def test_no_free_run_id_is_one_error_after_bounded_tries(folder, monkeypatch):
    ResultStore.create("results", "alias", "nl0001")
    calls = []
    monkeypatch.setattr(results_mod, "new_run_id", lambda: calls.append(1) or "nl0001")
    with pytest.raises(InputError, match="no free run id after 5 tries"):
        ResultStore.create("results", "alias", tries=5)
    assert len(calls) == 5


def test_a_given_run_id_that_exists_is_an_error_not_an_append(folder):
    ResultStore.create("results", "alias", "nl0001").append({"n": 1}, {})
    with pytest.raises(InputError, match="exists already"):
        ResultStore.create("results", "alias", "nl0001")
    assert len(ResultStore.open("results/alias/nl0001").records()) == 1


def test_records_are_not_appended_through_a_link(folder):
    lab, outside = folder
    st = ResultStore.create("results", "alias", "nl0001")
    os.symlink(outside, os.path.join(st.path, "records.jsonl"))
    with pytest.raises(UnsafePathError):
        st.append({"n": 1}, {})
    assert outside.read_text() == PRECIOUS


def test_resuming_a_directory_that_is_not_nslabs_own_is_refused_in_one_line(folder):
    from nslab.experiments.alias.study import AliasStudy
    from nslab.run.study import open_store
    lab, outside = folder
    run = shutil.copytree(os.path.join(DATA, "alias_run"), "alias_run")
    os.symlink(outside, os.path.join(run, "records.jsonl.bak"))
    with pytest.raises(InputError) as exc:
        open_store(AliasStudy(), None, "results", None, resume=run)
    assert "not a run directory of nslab's own" in str(exc.value)
    assert len(str(exc.value).splitlines()) == 1
    os.unlink(os.path.join(run, "records.jsonl.bak"))
    store, cfg = open_store(AliasStudy(), None, "results", None, resume=run)
    assert store.path == run and cfg is not None


# -- nslab report ----------------------------------------------------------------------
def test_report_of_a_folder_with_a_link_goes_to_a_new_directory(folder, capsys):
    lab, outside = folder
    run = shutil.copytree(os.path.join(DATA, "alias_run"), "alias_run")
    os.symlink(outside, os.path.join(run, "report.md"))
    assert main(["report", run]) == 0
    out = capsys.readouterr().out
    assert outside.read_text() == PRECIOUS
    assert os.path.islink(os.path.join(run, "report.md"))  # the folder is left as it was
    (new,) = os.listdir("results/reports")
    new_dir = os.path.join("results", "reports", new)
    assert new.startswith("alias_run-")
    assert f"the report goes to a copy, {new_dir}" in out and "report.md is a symbolic link" in out
    assert f"md: {new_dir}/report.md" in out
    assert "# " in open(os.path.join(new_dir, "report.md")).read()
    assert not os.path.islink(os.path.join(new_dir, "report.md"))


def test_report_copy_of_a_foreign_folder_leaves_its_packet_captures(folder, capsys):
    # captures may take gigabytes and nothing in a report reads them: the copy
    # leaves them where they are and says so
    lab, outside = folder
    run = shutil.copytree(os.path.join(DATA, "alias_run"), "alias_run")
    os.symlink(outside, os.path.join(run, "report.md"))
    os.makedirs(os.path.join(run, "raw"), exist_ok=True)
    for name in ("p0-r0-capture-h1.pcapng", "p0-r1-capture-h1.pcapng.part"):
        with open(os.path.join(run, "raw", name), "wb") as f:
            f.write(b"\x0a\x0d\x0d\x0a" * 1000)
    with open(os.path.join(run, "raw", "p0-r0-iperf.txt"), "w") as f:
        f.write("kept")
    assert main(["report", run]) == 0
    out = capsys.readouterr().out
    (new,) = os.listdir("results/reports")
    copied = os.path.join("results", "reports", new, "raw")
    assert sorted(os.listdir(copied)) == ["p0-r0-iperf.txt"]
    assert f"2 packet captures stay in {run}" in out
    assert os.path.getsize(os.path.join(run, "raw", "p0-r0-capture-h1.pcapng")) == 4000


def test_report_of_nslabs_own_directory_is_written_in_place(folder, capsys):
    run = shutil.copytree(os.path.join(DATA, "alias_run"), "alias_run")
    assert tree_is_safe(run) is None
    assert main(["report", run]) == 0
    assert f"md: {run}/report.md" in capsys.readouterr().out
    assert not os.path.exists("results")


def test_report_takes_only_a_registered_study_name_from_the_provenance(folder, capsys):
    lab, _ = folder
    (lab / "evil.yaml").write_text("name: evil\n")
    run = shutil.copytree(os.path.join(DATA, "alias_run"), "alias_run")
    prov_path = os.path.join(run, "provenance.json")
    prov = json.load(open(prov_path))
    prov["experiment"] = "../evil.yaml"
    write_atomic(prov_path, json.dumps(prov))
    rc = main(["report", run])
    err = capsys.readouterr().err
    assert rc == 2 and "experiment: '../evil.yaml' is not a registered study" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not os.path.exists(os.path.join(run, "report.md"))


# -- found in review: '..' after a link, root-owned links deep down, FIFOs, matplotlibrc ----
def test_a_link_that_a_following_dotdot_steps_out_of_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    os.symlink(outside / "sub", tmp_path / "lnk")
    with pytest.raises(safeio.UnsafePathError, match="lnk is a symbolic link"):
        safeio.write_atomic("lnk/../x.txt", "no")
    assert not (outside / "x.txt").exists()
    os.mkdir("plain")
    assert safeio.write_atomic("plain/../y.txt", "ok") and (tmp_path / "y.txt").read_text() == "ok"


def test_a_root_owned_link_deep_in_a_folder_is_refused_only_distribution_links_pass(tmp_path):
    os.symlink(tmp_path / "elsewhere", tmp_path / "results")  # as `sudo git clone` leaves it
    with pytest.raises(safeio.UnsafePathError):
        safeio.make_dirs(str(tmp_path / "results" / "alias"))
    if os.path.islink("/var/run") and os.lstat("/var/run").st_uid == 0:
        assert safeio.check_path("/var/run/nslab-x") == "/var/run/nslab-x"


def test_a_fifo_where_the_log_goes_is_refused_at_once(tmp_path):
    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    with pytest.raises(safeio.UnsafePathError, match="FIFO|not a regular file"):
        safeio.open_append(str(fifo))


def test_a_folders_matplotlibrc_changes_nothing(tmp_path, monkeypatch):
    (tmp_path / "matplotlibrc").write_text("backend: module://nslab_evil_backend\n"
                                          "lines.linewidth: 42\n")
    monkeypatch.chdir(tmp_path)
    import subprocess
    import sys
    code = ("from nslab.store.plotting import pyplot; plt = pyplot(); import matplotlib; "
            "print(matplotlib.get_backend(), matplotlib.rcParams['lines.linewidth'])")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    backend, width = out.stdout.split()
    assert backend.lower() == "agg" and float(width) != 42


def test_a_tree_nested_deeper_than_nslab_walks_is_one_line(tmp_path, monkeypatch):
    # os.walk and os.fwalk recurse (RecursionError past ~1000 levels, which
    # shutil.rmtree would hit too when pytest cleans up): 100 levels show the
    # walk stops at MAX_DEPTH without building a tree nothing could remove
    deep = tmp_path / "run"
    deep.mkdir()
    monkeypatch.chdir(deep)
    for _ in range(3 * safeio.MAX_DEPTH):
        os.mkdir("d")
        os.chdir("d")
    os.chdir(tmp_path)
    why = safeio.tree_is_safe(str(deep))
    assert why is not None and "nested deeper than" in why and "\n" not in why
    out = tmp_path / "copy"
    out.mkdir()
    skipped = safeio.copy_tree(str(deep), str(out))
    assert skipped and len(skipped) == 1


def test_a_path_through_a_file_is_one_clear_error(tmp_path):
    f = tmp_path / "plain"
    f.write_text("x")
    with pytest.raises(safeio.UnsafePathError, match="is not a directory"):
        safeio.check_path(str(f / "sub" / "out.csv"))
