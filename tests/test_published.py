"""The documents' own code under test, and verdicts that are about the designs the claims name.

* every code snippet of 000 and 004 has a ``published_*`` record;
* every fix in the transcriptions is needed: the published line raises the error the findings page lists;
* no cell of the verdict table is a verdict on a claim the documents do not make about that
  design: every other applicable cell is a cross-check, rendered apart (from the claims' subjects).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import posenc
from posenc.encoders.published import doc000, doc004
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT, DESIGNS, SUBJECTS, is_subject
from posenc.harness.verdicts.matrix import declared_matrix, render_markdown, roles
from posenc.harness.catalogue.published_records import PUBLISHED_RECORDS
from posenc.harness.catalogue.states import State

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ("000 §2.1", "000 §2.2", "000 §3.2", "000 §3.3", "000 §5.1", "000 §5.2", "000 §5.3",
            "004 §3.1-3.3", "004 §2.2, §4-5.1", "004 §7")


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_every_snippet_has_a_published_record(snippet):
    found = [r.name for r in PUBLISHED_RECORDS if r.source.startswith(snippet)]
    assert len(found) == 1, f"{snippet}: published records {found}"


def test_published_records_are_registered_and_name_their_correction():
    names = {r.name for r in posenc.records()}
    for record in PUBLISHED_RECORDS:
        assert record.name in names and record.name.startswith("published_")
        assert record.corrects in names, f"{record.name} corrects {record.corrects!r}, which is not registered"


D, HEADS, SEQ = 16, 2, 4
BSHD = torch.randn(1, SEQ, HEADS, D // HEADS)
BSD = torch.randn(1, SEQ, D)
UNFIXED = {
    "RotaryPositionEmbedding": lambda: doc000.RotaryPositionEmbedding(D // HEADS, 64, fixed=False)(BSHD),
    "HybridPositionEncoding": lambda: doc000.HybridPositionEncoding(D, 64, fixed=False)(BSD),
    "LinearAttentionWithRoPE": lambda: doc000.LinearAttentionWithRoPE(D, HEADS, fixed=False)(BSD),
    "DynamicPositionEncoding": lambda: doc000.DynamicPositionEncoding(D // HEADS, 64, fixed=False)(BSHD),
    "MultiHeadRoPE": lambda: doc004.MultiHeadRoPE(D, HEADS, fixed=False)(BSHD),
}
ERRORS = {"RuntimeError": RuntimeError, "AttributeError": AttributeError, "ValueError": ValueError}


@pytest.mark.parametrize("fix", doc000.FIXES + doc004.FIXES[:1], ids=lambda f: f"{f[0]} {f[1]}")
def test_each_fix_is_needed_the_published_line_raises(fix):
    _, name, _, error = fix
    expected = ERRORS[error.split(":")[0]]
    with pytest.raises(expected):
        UNFIXED[name]()


def test_the_published_multihead_step_runs_only_where_seq_len_equals_num_heads():
    """004 §7 as printed: (1, seq, d/2) broadcasts against (batch, seq, heads, head_dim/2)."""
    doc_example = torch.randn(1, 4, 4, 2)  # the document's seq 4, 4 heads of head_dim 2 (d_model 8)
    assert doc004.MultiHeadRoPE(8, 4, fixed=False)(doc_example).shape == (1, 4, 4, 8)  # runs, shape changed
    with pytest.raises(RuntimeError):
        doc004.MultiHeadRoPE(64, 4, fixed=False)(torch.randn(1, 5, 4, 16))


def test_004_apply_rope_turns_float16_into_float32_as_its_contract_cell_says():
    """§3.2's sin/cos are float32, so type promotion casts a float16 input up (no half dtype is declared)."""
    from posenc.harness.catalogue.registry import get
    x = torch.randn(1, 5, 4, 16).half()
    assert doc004.MultiHeadRoPE(64, 4)(x).dtype == torch.float32
    assert doc004.RoPE004()(x).dtype == torch.float32
    for name in ("published_rope_004", "published_multihead_004"):
        record = get(name)
        assert torch.float16 not in record.limits.dtypes
        assert "float16 input comes back float32" in record.declared("contract").reason


def test_fixed_published_code_runs():
    assert doc000.DynamicPositionEncoding(8, 64)(BSHD).shape == BSHD.shape
    assert doc000.HybridPositionEncoding(D, 64)(BSD).shape == BSD.shape
    assert doc000.LinearAttentionWithRoPE(D, HEADS)(BSD).shape == BSD.shape


# ---- subjects: a cell is a verdict on the documents only where the claim is about that design


def test_every_claim_names_its_subjects():
    assert set(SUBJECTS) == set(CLAIMS)
    for claim, designs in SUBJECTS.items():
        assert designs and set(designs) <= set(DESIGNS), claim


def test_claims_md_lists_the_same_subjects():
    text = (ROOT / "specs" / "claims.md").read_text()
    table = dict(re.findall(r"^\| (\S+) \| ((?:`[a-z_0-9]+`(?:, )?)+) \|$", text, flags=re.MULTILINE))
    assert {c: tuple(re.findall(r"`([a-z_0-9]+)`", v)) for c, v in table.items()} == SUBJECTS


@pytest.mark.parametrize("record", posenc.records(), ids=lambda r: r.name)
def test_no_verdict_cell_outside_its_claims_subjects(record):
    for claim in (CONTRACT, *CLAIMS):
        role = record.role(claim)
        if role == "verdict":
            assert is_subject(claim, record.designs), f"{claim} on {record.name} is not about {record.designs}"
        elif role == "cross-check":
            assert not is_subject(claim, record.designs)


def test_category_errors_of_the_review_are_gone():
    get = posenc.get
    assert get("linear_attention_rope").role("ATT-2") == State.NA
    assert get("learnable").role("ATT-4") == State.NA and get("sinusoidal").role("ATT-4") == State.NA
    assert get("hybrid").role("ROPE-3") == "cross-check" and get("dynamic").role("ROPE-4") == "cross-check"
    assert {r.name for r in posenc.records() if r.role("ROPE-13") == "verdict"} == {
        "rope_concatenated", "published_rope_004", "published_multihead_004"}
    assert get("learnable").declared("ABS-5").status == State.HOLDS


def test_markdown_verdict_table_holds_subject_cells_only():
    records = posenc.records()
    text = render_markdown(declared_matrix(records), roles(records))
    verdicts, crosses = text.split("#### Cross-checks")
    names = [e.strip("` ") for e in verdicts.splitlines()[0].split("|")[2:-1]]
    for line in verdicts.splitlines()[2:]:
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.split("|")[1:-1]]
        claim = cells[0].split()[0]
        for name, cell in zip(names, cells[1:]):
            if cell and cell != State.NA:
                assert posenc.get(name).role(claim) == "verdict", (claim, name, cell)
    assert "cross-check" in crosses.lower() or "Cross" in crosses
