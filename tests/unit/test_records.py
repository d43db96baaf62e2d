"""Typed, versioned records: old runs load through their upgrade, a renamed key
fails at load naming the file and line, a newer schema is refused."""
import json
import shutil

import pytest

from nslab.errors import InputError
from nslab.experiments.alias.records import SCHEMA as ALIAS
from nslab.experiments.ecmp.records import SCHEMA as ECMP
from nslab.experiments.rfc2544.records import SCHEMA as RFC
from nslab.experiments.rfc2544.records import BackToBack, Throughput, Trials
from tests.conftest import data


def test_every_captured_run_loads_typed():
    alias = ALIAS.load(data("alias_run"))
    assert len(alias) == 6 and alias[0].schema_version == 4  # upgraded from 1, through 2, 3
    assert alias[0].measurements.sndbuf_limited_pct is None  # not measured before version 3
    assert alias[0].measurements.servers_restarted is None  # not recorded before version 4
    assert alias[0].measurements.receiver_measured_at == "receiver sockets, bytes received"
    assert {r.params.mode for r in alias} == {"alias", "parallel"}
    ecmp = ECMP.load(data("ecmp_run"))
    assert all(len(r.measurements.streams) == 3 for r in ecmp)
    rfc = RFC.load(data("rfc2544_run")) + RFC.load(data("rfc2544_b2b_run"))
    kinds = {r.params.test: type(r.measurements) for r in rfc}
    assert kinds == {"throughput": Throughput, "latency": Trials, "loss": Trials,
                     "back-to-back": BackToBack}


def _rewrite(tmp_path, src, fn):
    run = tmp_path / "run"
    shutil.copytree(data(src), run)
    lines = open(run / "records.jsonl").read().splitlines()
    recs = [json.loads(l) for l in lines]
    fn(recs)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(run)


def test_a_renamed_key_fails_at_load_with_the_file_and_line(tmp_path):
    def rename(recs):
        m = recs[2]["measurements"]
        m["receiver_Bps"] = m.pop("receiver_bps")
    run = _rewrite(tmp_path, "alias_run", rename)
    with pytest.raises(InputError, match=r"records\.jsonl:3: measurements\.receiver_bps: "
                                         r"'receiver_bps' is required"):
        ALIAS.load(run)


def test_a_newer_schema_is_refused_in_one_line(tmp_path):
    def newer(recs):
        recs[0]["schema_version"] = ECMP.version + 1
    run = _rewrite(tmp_path, "ecmp_run", newer)
    with pytest.raises(InputError, match=r"records\.jsonl:1: schema version 2 is newer than this "
                                         r"nslab understands \(1\)") as info:
        ECMP.load(run)
    assert "\n" not in str(info.value)


def test_a_torn_last_line_is_skipped_but_a_torn_middle_line_is_an_error(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(data("ecmp_run"), run)
    with open(run / "records.jsonl", "a") as f:
        f.write('{"schema_version": 1, "params": {"policy"')  # killed mid-write
    assert len(ECMP.load(str(run))) == 6
    text = open(run / "records.jsonl").read().splitlines()
    (run / "records.jsonl").write_text("\n".join([text[0], text[-1]] + text[1:-1]) + "\n")
    with pytest.raises(InputError, match=r"records\.jsonl:2: not a JSON record"):
        ECMP.load(str(run))
