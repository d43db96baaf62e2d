"""`nslab export` of lists of records as rows (RFC 2544's trials, the paper's
Table 3, and its searches' probes) and of reproductions: found by a run id
inside one, by its directory or its name, each table holding every study's
rows. Stored runs under tests/data, no root."""
import csv
import json
import os
import shutil

import pytest

from nslab.cmdline.cli import main
from nslab.cmdline.export import find_runs, reproduction_runs
from nslab.cmdline.exporttables import list_tables, singular
from nslab.errors import InputError

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
STAMP = "20261128-094324"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _stored(name):
    with open(os.path.join(DATA, name, "records.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_rfc2544s_loss_trials_are_rows_one_per_offered_load(tmp_path):
    """The report's Table 3 format: per DUT and frame size (and repeat), one
    row per load of the loss test's sweep, with its latency, throughput and
    the DUT's CPU; nothing of it is a JSON cell."""
    out = tmp_path / "out"
    assert main(["export", os.path.join(DATA, "rfc2544_run"), "-o", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["claims.csv", "points.csv", "probes.csv", "trials.csv"]
    trials, points = _rows(out / "trials.csv"), _rows(out / "points.csv")
    stored = _stored("rfc2544_run")
    loss = [(i, r) for i, r in enumerate(stored, 1) if r["params"]["test"] == "loss"]
    table3 = [t for t in trials if t["params.test"] == "loss"]
    assert len(table3) == sum(len(r["measurements"]["trials"]) for _, r in loss) == 22
    for point_no, rec in loss:
        rows = [t for t in table3 if t["point_no"] == str(point_no)]
        assert [int(t["trial_no"]) for t in rows] == list(range(1, len(rows) + 1))
        for row, trial in zip(rows, rec["measurements"]["trials"]):
            assert (row["params.dut"], row["params.frame"]) == (rec["params"]["dut"],
                                                               str(rec["params"]["frame"]))
            assert float(row["target_fps"]) == trial["target_fps"]
            assert float(row["offered_bps"]) == trial["offered_bps"]
            assert float(row["latency_us.avg"]) == trial["latency_us"]["avg"]
            assert float(row["throughput_bps"]) == trial["throughput_bps"]
            assert float(row["dut_occupancy_pct"]) == trial["dut_occupancy_pct"]
    # the points keep their scalars and join the rows by point_no
    assert [p["point_no"] for p in points] == [str(i) for i in range(1, len(stored) + 1)]
    assert "measurements.trials" not in points[0] and "measurements.probes" not in points[0]
    assert all(len(cell) < 200 for p in points for cell in p.values())
    # a throughput search's probes are rows too
    probes = _rows(out / "probes.csv")
    assert len(probes) == sum(len(r["measurements"].get("probes") or []) for r in stored)
    assert {"point_no", "probe_no", "params.dut", "offered_fps", "loss_pct"} <= set(probes[0])


def test_units_of_item_columns_and_json_arrays(tmp_path):
    out = tmp_path / "out"
    assert main(["export", os.path.join(DATA, "rfc2544_run"), "--table", "trials",
                 "--format", "json", "-o", str(out)]) == 0
    doc = json.load(open(out / "trials.json"))
    assert doc["table"] == "trials" and doc["units"]["latency_us.avg"] == "us"
    assert doc["units"]["target_fps"] == "frames/s" and "trial_no" not in doc["units"]
    row = doc["rows"][0]
    assert isinstance(row["latency_us.avg"], float)


def test_a_list_inside_an_item_stays_one_cell(tmp_path):
    """Back-to-back searches hold their own probes: the searches are rows,
    each search's probes a JSON cell (an array in JSON)."""
    out = tmp_path / "out"
    assert main(["export", os.path.join(DATA, "rfc2544_b2b_run"), "--table", "searches",
                 "--format", "json", "-o", str(out)]) == 0
    rows = json.load(open(out / "searches.json"))["rows"]
    stored = [s for r in _stored("rfc2544_b2b_run") for s in r["measurements"].get("searches") or []]
    assert len(rows) == len(stored) and rows[0]["probes"] == stored[0]["probes"]


def test_which_lists_become_tables():
    dumps = [{"measurements": {"trials": [{"a": 1}], "probes": [], "series": [1.0, 2.0],
                               "mixed": [{"a": 1}], "empty": [], "points": [{"x": 1}],
                               "Bad-Name": [{"a": 1}]}},
             {"measurements": {"trials": [], "mixed": 3, "probes": None}}]
    assert list_tables(dumps) == ["trials"]  # a list of scalars, a list only sometimes,
    # one never filled, a table's own name and a name that is no file's stay cells
    assert [singular(n) for n in ("trials", "searches", "probes", "boxes", "s")] == \
        ["trial", "search", "probe", "box", "s"]


# -- reproductions ----------------------------------------------------------------------
def reproduction(results, runs=(("alias", "alias_run"), ("ecmp", "ecmp_run"),
                                ("rfc2544", "rfc2544_run"))):
    """``results/reproduce/<STAMP>/<study>/<id>`` as `nslab reproduce` writes it."""
    root = results / "reproduce" / STAMP
    for study, name in runs:
        run_id = json.load(open(os.path.join(DATA, name, "provenance.json")))["run_id"]
        shutil.copytree(os.path.join(DATA, name), root / study / run_id)
    (root / "mode").write_text("quick\n")
    return root


def test_a_run_of_a_reproduction_is_found_by_its_id(tmp_path):
    results = tmp_path / "results"
    root = reproduction(results)
    found = find_runs("nlb9f9", str(results))
    assert found.runs == [str(root / "rfc2544" / "nlb9f9")] and found.root is None
    out = tmp_path / "out"
    assert main(["--results", str(results), "export", "nlb9f9", "--table", "points",
                 "-o", str(out)]) == 0
    assert {r["run_id"] for r in _rows(out / "points.csv")} == {"nlb9f9"}


def test_a_reproduction_is_one_table_per_kind_with_a_study_column(tmp_path, capsys):
    results = tmp_path / "results"
    root = reproduction(results)
    assert reproduction_runs(str(root)) == [str(root / "alias" / "nlc945"),
                                            str(root / "ecmp" / "nle9b7"),
                                            str(root / "rfc2544" / "nlb9f9")]
    out = tmp_path / "out"
    for run in (str(root), STAMP):  # its directory, or its name under <results>/reproduce
        assert main(["--results", str(results), "export", run, "-o", str(out)]) == 0
        said = capsys.readouterr().out
        assert sorted(os.listdir(out)) == ["claims.csv", "points.csv", "probes.csv",
                                           "streams.csv", "trials.csv"]
        points = _rows(out / "points.csv")
        counts = {s: sum(p["study"] == s for p in points) for s in ("alias", "ecmp", "rfc2544")}
        assert counts == {s: len(_stored(n)) for s, n in (("alias", "alias_run"),
                                                          ("ecmp", "ecmp_run"),
                                                          ("rfc2544", "rfc2544_run"))}
        # every study's columns, blank where a study has none
        alias_row = next(p for p in points if p["study"] == "alias")
        assert alias_row["params.dut"] == "" and alias_row["params.mode"] != ""
        claims = _rows(out / "claims.csv")
        assert {c["study"] for c in claims} == {"alias", "ecmp", "rfc2544"}
        assert {t["study"] for t in _rows(out / "trials.csv")} == {"rfc2544"}
        assert f"{out / 'points.csv'}: {len(points)} rows" in said


def test_one_table_of_a_reproduction_on_stdout(tmp_path, capsys):
    results = tmp_path / "results"
    reproduction(results)
    assert main(["--results", str(results), "export", STAMP, "--table", "claims",
                 "-o", "-"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [r["study"] for r in rows][:1] == ["alias"] and rows[-1]["study"] == "rfc2544"


def test_what_cannot_be_found_is_one_line(tmp_path):
    results = tmp_path / "results"
    root = results / "reproduce" / STAMP
    root.mkdir(parents=True)
    (root / "mode").write_text("quick\n")
    with pytest.raises(InputError, match="a reproduction with no study's run in it yet"):
        find_runs(STAMP, str(results))
    with pytest.raises(InputError, match="20261128-000000: no reproduction directory"):
        find_runs("20261128-000000", str(results))
    with pytest.raises(InputError, match=r"nl1234: no run directory .*results/\*/nl1234 or "
                                         r".*results/reproduce/\*/\*/nl1234"):
        find_runs("nl1234", str(results))


def test_an_id_in_a_reproduction_and_beside_it_is_two_runs(tmp_path):
    results = tmp_path / "results"
    reproduction(results, (("ecmp", "ecmp_run"),))
    shutil.copytree(os.path.join(DATA, "ecmp_run"), results / "ecmp" / "nle9b7")
    with pytest.raises(InputError, match="several runs have this id"):
        find_runs("nle9b7", str(results))


def test_a_link_in_a_reproduction_is_not_followed(tmp_path):
    results = tmp_path / "results"
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(os.path.join(DATA, "ecmp_run"), elsewhere / "nle9b7")
    root = results / "reproduce" / STAMP
    root.mkdir(parents=True)
    (root / "mode").write_text("quick\n")
    (root / "ecmp").symlink_to(elsewhere)
    with pytest.raises(InputError, match="no run directory"):
        find_runs("nle9b7", str(results))
    with pytest.raises(InputError, match="no study's run in it yet"):
        find_runs(str(root), str(results))
