"""`memplan conformance`, as a user runs it: it writes its section of the report and nothing else."""

from __future__ import annotations

from typer.testing import CliRunner

from app.cli import app
from tests.runtime.test_conformance import CONFORMANCE_MD, SECTION, outside_section, sections


def test_fast_run_rewrites_its_section_and_keeps_the_interchange_one(tmp_path):
    doc = tmp_path / "docs" / "CONFORMANCE.md"
    doc.parent.mkdir()
    before = CONFORMANCE_MD.read_text()
    doc.write_text(before)
    result = CliRunner().invoke(app, ["conformance", "--fast", "--output", str(doc)])
    assert result.exit_code == 0, result.output
    after = doc.read_text()
    assert outside_section(after) == outside_section(before)
    assert sections(after)["interchange"] == sections(before)["interchange"]
    assert "`python -m runtime.conformance --fast`" in sections(after)[SECTION]
    assert f"wrote {doc}" in result.output.replace("\n", "")
