import os

import pytest

from nslab.errors import InputError
from nslab.runtime.provenance import collect_provenance
from nslab.store.results import SCHEMA_VERSION, ResultStore, point_key


def test_records_carry_schema_params_measurements_and_relative_raw_paths(tmp_path):
    st = ResultStore(str(tmp_path), "alias", "nl0001")
    raw = st.raw_path("n1.txt")
    open(raw, "w").write("x")
    st.append({"n": 1}, {"mbps": 941.2}, raw=[raw])
    (rec,) = st.records()
    assert rec["schema_version"] == SCHEMA_VERSION
    assert rec["params"] == {"n": 1} and rec["measurements"] == {"mbps": 941.2}
    assert rec["raw"] == ["raw/n1.txt"]
    assert os.path.exists(os.path.join(st.path, rec["raw"][0]))


def test_resume_skips_points_done_and_survives_a_torn_line(tmp_path):
    st = ResultStore(str(tmp_path), "alias", "nl0002")
    st.append({"n": 1, "rep": 0}, {"mbps": 1})
    with open(os.path.join(st.path, "records.jsonl"), "a") as f:
        f.write('{"schema_version": 1, "params": {"n": 2')  # crash mid-write
    again = ResultStore.open(st.path)
    assert again.done_keys() == {point_key({"rep": 0, "n": 1})}


def test_open_refuses_a_directory_that_is_not_a_result(tmp_path):
    with pytest.raises(InputError, match="not a results directory"):
        ResultStore.open(str(tmp_path))


def test_provenance_without_a_lab(tmp_path):
    st = ResultStore(str(tmp_path), "x", "nl0004")
    st.write_provenance(collect_provenance(extra={"note": "unit"}))
    prov = st.provenance()
    assert prov["schema_version"] == SCHEMA_VERSION and prov["kernel"] and prov["note"] == "unit"
    assert "versions" in prov and "git_commit" in prov
