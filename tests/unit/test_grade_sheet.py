"""The grade sheet of ``nslab grade``, drawn from stored results only: the CSV
(student x stage x check), the HTML report card (escaped, no script), the
stored grade book read with bounds; and the parts of grading that need no
lab (a folder's name, a folder that is a link, a lab that was not built).
No root."""
import csv
import io
import json
import os

import pytest

from nslab.errors import InputError
from nslab.model.checkfile import load as load_checks
from nslab.run import grade as grading
from nslab.store import gradesheet
from nslab.store.checkreport import CheckResult
from nslab.store.gradesheet import GradeBook, StageOutline, StudentGrade

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKS = os.path.join(ROOT, "examples", "clos-lab", "checks.yaml")


def _r(stage, number, label, status, **kw):
    return CheckResult.made(stage=stage, stage_title=f"stage {stage}", number=number,
                            label=label, kind="bgp", node="spine1", status=status, **kw)


def book():
    stages = [StageOutline(number=1, title="The fabric is up", checks=["bgp spine1", "ping"]),
              StageOutline(number=2, title="A link fails", checks=["route server2"])]
    right = StudentGrade(student="alice", folder="class/alice", results=[
        _r(1, 1, "bgp spine1", "pass", seen="spine1-eth0 Established"),
        _r(1, 2, "ping", "pass"), _r(2, 1, "route server2", "pass")])
    broken = StudentGrade(student="bob", folder="class/bob", results=[
        _r(1, 1, "bgp spine1", "fail", seen="spine1-eth1 Active",
           diff=["peers.spine1-eth1.state: expected Established, saw Active"]),
        _r(1, 2, "ping", "pass"),
        _r(2, 1, "route server2", "fail", diff=["nexthops: expected 1, saw 0"])])
    hostile = StudentGrade(
        student="<script>alert(1)</script>\\x1b[31m", folder="class/x",
        problem="lab.yaml: a symbolic link; nslab follows no link",
        results=[_r(1, 1, "bgp spine1", "error", seen="could not run: <b>link</b>"),
                 _r(1, 2, "ping", "error"), _r(2, 1, "=cmd|' /C calc'!A0", "error")])
    return GradeBook(title="A two-spine clos", checks="checks.yaml", made=1.0, stages=stages,
                     students=[right, broken, hostile])


def test_the_csv_is_one_row_per_student_stage_and_check():
    rows = list(csv.reader(io.StringIO(gradesheet.to_csv(book()))))
    assert rows[0] == list(gradesheet.CSV_COLUMNS)
    assert len(rows) == 1 + 9
    assert rows[1][:7] == ["alice", "1", "stage 1", "1", "bgp spine1", "spine1", "pass"]
    assert rows[4][6] == "fail" and rows[4][9] == \
        "peers.spine1-eth1.state: expected Established, saw Active"
    assert rows[9][4] == "'=cmd|' /C calc'!A0"          # never a formula in a spreadsheet


def test_the_report_card_has_a_cell_per_check_and_escapes_everything():
    html = gradesheet.to_html(book())
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>link</b>" not in html
    assert html.count('class="ok"') == 4 and html.count('class="bad"') >= 2
    assert html.count('class="err"') >= 3
    assert "3/3" in html and "1/3" in html and "0/3" in html
    assert "stage 1: The fabric is up" in html and "1.2" in html and "2.1" in html
    assert "Not built: lab.yaml: a symbolic link" in html
    assert "peers.spine1-eth1.state: expected Established, saw Active" in html


def test_the_sheet_is_drawn_again_from_the_stored_book(tmp_path):
    path = tmp_path / "grades.json"
    path.write_text(gradesheet.dumps(book()))
    stored = gradesheet.load(str(path))
    assert stored == book()
    assert gradesheet.to_csv(stored) == gradesheet.to_csv(book())
    assert [s.score for s in stored.students] == [(3, 3), (1, 3), (0, 3)]


def test_a_stored_book_is_typed_and_bounded(tmp_path):
    bad = json.loads(gradesheet.dumps(book()))
    bad["students"][0]["results"][0]["status"] = "rm -rf"
    (tmp_path / "g.json").write_text(json.dumps(bad))
    with pytest.raises(InputError, match="not a grade book: students.0.results.0.status"):
        gradesheet.load(str(tmp_path / "g.json"))
    (tmp_path / "deep.json").write_text("[" * 100 + "]" * 100)
    with pytest.raises(InputError, match="not a grade book"):
        gradesheet.load(str(tmp_path / "deep.json"))
    os.symlink(tmp_path / "g.json", tmp_path / "link.json")
    with pytest.raises(InputError, match="not a grade book"):
        gradesheet.load(str(tmp_path / "link.json"))


def test_a_student_is_named_by_the_folder_escaped_and_cut():
    assert grading.student_name("/class/alice/") == "alice"
    assert grading.student_name("/class/\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert len(grading.student_name("/c/" + "a" * 300)) == grading.MAX_NAME


def test_a_folder_that_is_a_link_or_a_file_is_not_graded(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    (tmp_path / "file").write_text("x")
    assert grading.folder_problem(str(tmp_path / "real")) is None
    assert "symbolic link" in grading.folder_problem(str(tmp_path / "link"))
    assert grading.folder_problem(str(tmp_path / "file")) == "not a folder"
    assert grading.folder_problem(str(tmp_path / "none"))


def test_a_folder_whose_lab_cannot_be_read_gets_an_error_per_check_and_builds_nothing(
        tmp_path, monkeypatch):
    suite = load_checks(CHECKS)

    def no_lab(*a, **kw):
        raise AssertionError("no lab may be built for this folder")
    monkeypatch.setattr(grading, "Lab", no_lab)
    (tmp_path / "eve").mkdir()
    os.symlink("/etc/hostname", tmp_path / "eve" / "lab.yaml")
    (tmp_path / "mallory").mkdir()
    os.mkfifo(tmp_path / "mallory" / "lab.yaml")
    (tmp_path / "trent").mkdir()
    (tmp_path / "trent" / "lab.yaml").write_text("nodes: {h1: {sysctls: {kernel.panic: 1}}}\n")
    (tmp_path / "peggy").mkdir()
    (tmp_path / "peggy" / "lab.py").write_text("import os; os.system('reboot')\n")
    total = sum(len(p.checks) for p in suite.stages)
    for name in ("eve", "mallory", "trent", "peggy"):
        g = grading.grade_folder(str(tmp_path / name), suite, "lab.yaml")
        assert g.problem and len(g.results) == total, (name, g.problem)
        assert {r.status for r in g.results} == {"error"}
        assert g.results[0].seen.startswith("could not run: ")
    assert "sysctls" in grading.grade_folder(str(tmp_path / "trent"), suite, "lab.yaml").problem


def test_grade_stores_the_book_then_draws_the_sheet_from_it(tmp_path, monkeypatch):
    suite = load_checks(CHECKS)
    monkeypatch.setattr(grading, "grade_folder", lambda folder, s, t, say: StudentGrade(
        student=grading.student_name(folder), results=grading.errors_for(s, "not built")))
    said = []
    out = tmp_path / "out"
    stored = grading.grade([str(tmp_path / "a"), str(tmp_path / "b")], suite, "lab.yaml",
                           str(out), say=said.append)
    assert sorted(os.listdir(out)) == ["grades.csv", "grades.html", "grades.json"]
    assert [s.student for s in stored.students] == ["a", "b"]
    assert [st.title for st in stored.stages] == [p.title for p in suite.stages]
    assert said[0] == "grading a (1/2)" and said[1] == "  0/13 checks passed"
