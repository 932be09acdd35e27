"""Every claim of the catalogue (specs/claims.md) is tracked and decided by at least one spec."""

import re
from pathlib import Path

from posenc.harness.catalogue.claims import CLAIMS, NOT_DECIDABLE
from posenc.harness.catalogue.spec_index import spec_functions

CATALOGUE = Path(__file__).resolve().parents[1] / "specs" / "claims.md"
SPLIT = {"ROPE-10": {"ROPE-10a", "ROPE-10b"}}  # claims with parts (a) and (b)


def catalogue_ids() -> set[str]:
    return set(re.findall(r"^\| ([A-Z]+-\d+) \|", CATALOGUE.read_text(), flags=re.MULTILINE))


def test_catalogue_is_parsed():
    ids = catalogue_ids()
    assert len(ids) >= 30 and {"ABS-1", "ROPE-14", "PERF-2"} <= ids


def test_every_catalogue_claim_is_tracked():
    expected = set()
    for claim in catalogue_ids():
        expected |= SPLIT.get(claim, {claim})
    assert expected == set(CLAIMS)


def test_every_claim_has_a_spec():
    covered = {s.claim for s in spec_functions()}
    missing = [c for c in CLAIMS if c not in covered and c not in NOT_DECIDABLE]
    assert not missing, f"claims without a spec: {missing}"


def test_every_spec_cites_a_catalogue_claim_in_its_module_docstring():
    import importlib

    for spec in spec_functions():
        if spec.claim == "contract":
            continue
        doc = importlib.import_module(f"specs.{spec.module}").__doc__ or ""
        assert spec.claim in doc, f"{spec.nodeid}: module docstring does not cite {spec.claim}"
