"""Declarations that age well.

* An old plug-in whose refutation a claim's revision made moot reads XPASS with the revision and
  the claim that decides the old meaning now: the plug-in declares what ROPE-9 and ROPE-11 meant
  before their revisions (``posenc.harness.catalogue.claims.REVISIONS``), a fixed table's end as a cache
  defect (ROPE-9) and dynamic NTK's length-dependent schedule as a half-precision failure (ROPE-11).
* A declared refutation whose reason is true does not hide a second defect of the same spec that
  contradicts the record's own geometry: YaRN declared partial (half the head rotated), ROPE-2
  refuted because YaRN's θ is not base^(−2i/d), built rotating the whole head.
"""

from __future__ import annotations

import textwrap

from posenc.harness.catalogue.claims import REVISIONS, revision_hint
from posenc.harness.catalogue.states import State
from tests.test_faults import report, run_specs

OLD_PLUGIN = '''
from dataclasses import replace

import posenc

table = posenc.get("rope_interleaved")
posenc.register(replace(table, name="old_fixed_table", origin="", limits=replace(table.limits, max_position=64),
                        claims={**table.claims, "ROPE-9": posenc.refuted("the cache ends at 64 rows")}))
dynamic = posenc.get("rope_dynamic_ntk")
posenc.register(replace(dynamic, name="old_dynamic_ntk", origin="",
                        claims={**dynamic.claims, "ROPE-11": posenc.refuted("θ grows with the call's length")}))
'''


def test_an_xpass_on_a_revised_claim_names_the_revision_and_the_claim_that_owns_the_old_meaning(tmp_path):
    (tmp_path / "old_plugin.py").write_text(textwrap.dedent(OLD_PLUGIN))
    result = run_specs("--plugin", tmp_path / "old_plugin.py", "--encoders", "old_fixed_table,old_dynamic_ntk",
                       "-k", "used_module or half_precision", matrix_dir=tmp_path / "reports")
    data = report(tmp_path / "reports" / "verdicts.json")
    assert data["matrix"]["ROPE-9"]["old_fixed_table"] == State.UNEXPECTEDLY_HOLDS, data["matrix"]["ROPE-9"]
    assert data["matrix"]["ROPE-11"]["old_dynamic_ntk"] == State.UNEXPECTEDLY_HOLDS, data["matrix"]["ROPE-11"]
    for claim, encoder, reason in (("ROPE-9", "old_fixed_table", "the cache ends at 64 rows"),
                                   ("ROPE-11", "old_dynamic_ntk", "θ grows with the call's length")):
        messages = {o["message"] for o in data["outcomes"] if o["claim"] == claim and o["encoder"] == encoder}
        assert messages == {f"declared refuted ({reason}), but the spec found no violation - "
                            f"{revision_hint(claim)}"}, messages
        assert "a refutation of that belongs on ROPE-10a" in revision_hint(claim)
    assert "was revised on 2026-12-01" in " ".join(result.stdout.split())


def test_every_revision_names_a_catalogue_claim_and_is_in_the_catalogue():
    from pathlib import Path

    from posenc.harness.catalogue.claims import CLAIMS

    catalogue = Path(__file__).resolve().parents[1] / "specs" / "claims.md"
    for claim, revisions in REVISIONS.items():
        assert claim in CLAIMS and all(r.moved_to in (None, *CLAIMS) for r in revisions)
        assert all(r.change in " ".join(catalogue.read_text().split()) for r in revisions)
    assert revision_hint("ROPE-5") == ""


PARTIAL_YARN = '''
from dataclasses import replace

import posenc
from posenc.harness.catalogue.record_builders import rope_from_geometry

yarn = posenc.get("rope_yarn")
half = replace(yarn.geometry, rotary_fraction=0.5)
posenc.register(replace(yarn, name="partial_yarn", origin="", geometry=half, build=rope_from_geometry(half)))
posenc.register(replace(yarn, name="yarn_ignoring_its_fraction", origin="", geometry=half,
                        build=rope_from_geometry(yarn.geometry)))
'''


def test_a_true_refutation_does_not_hide_a_contradiction_of_the_declared_geometry(tmp_path):
    (tmp_path / "partial_yarn.py").write_text(textwrap.dedent(PARTIAL_YARN))
    run_specs("--plugin", tmp_path / "partial_yarn.py", "--encoders", "partial_yarn,yarn_ignoring_its_fraction",
              "-k", "frequencies_follow_the_formula", matrix_dir=tmp_path / "reports")
    data = report(tmp_path / "reports" / "verdicts.json")
    assert data["matrix"]["ROPE-2"]["partial_yarn"] == State.REFUTED  # the declared reason, and nothing else
    assert data["matrix"]["ROPE-2"]["yarn_ignoring_its_fraction"] == State.UNEXPECTEDLY_FAILING
    (found,) = {o["message"] for o in data["outcomes"] if o["encoder"] == "yarn_ignoring_its_fraction"}
    assert found == ("[ROPE-2] yarn_ignoring_its_fraction: the map turns 8 pairs of head_dim 16; the geometry rotates "
                     "4 (the declared refutation does not excuse it: it contradicts the record's own geometry)")
