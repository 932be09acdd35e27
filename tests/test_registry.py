"""The registry's declarations are complete, consistent with the specs, and enforced."""

import dataclasses
import sys

import pytest
import torch

import posenc
from posenc.harness.catalogue.records import SPEC_CONFIG
from posenc.harness.catalogue.claims import CLAIMS, CONTRACT
from posenc.harness.catalogue.spec_index import spec_functions
from posenc.harness.catalogue.states import State

SPECS = spec_functions()
BUILTINS = [r for r in posenc.records() if r.origin == "built-in"]


def _minimal_record(**overrides):
    fields = dict(name="x", build=lambda c: posenc.RotaryEmbedding(c.head_dim), kind="rotary", source="test",
                  claims=posenc.rotary_claims(), geometry=posenc.RotaryGeometry())
    return posenc.EncoderRecord(**{**fields, **overrides})


def test_every_document_design_has_a_builtin_record():
    names = {r.name for r in BUILTINS}
    assert {"learnable", "sinusoidal", "rope_complex", "rope_interleaved", "rope_concatenated", "rope_half_split",
            "rope_multihead", "attention_rope", "attention_rope_causal", "hybrid", "linear_attention_rope",
            "dynamic", "rope_linear_scaled"} <= names


@pytest.mark.parametrize("record", BUILTINS, ids=lambda r: r.name)
def test_builtin_declares_every_claim_and_names_its_source(record):
    assert set(record.claims) - {CONTRACT} == set(CLAIMS)
    assert record.source and record.description
    if record.kind == "producer":  # a producer's protocol stands for a geometry; its module cites its paper
        producer = record.make()
        module_doc = sys.modules[getattr(producer, "func", producer).__module__].__doc__ or ""
        assert record.producer is not None and module_doc.strip(), record.name
        return
    assert record.geometry is not None or record.kind in ("additive", "bias")
    head_dim = next(d for d in range(16, 257, 2) if record.supports_head_dim(d))  # Qwen3-VL's 6:5:5 needs 32
    cls = type(record.make(d_model=head_dim * SPEC_CONFIG.n_heads))
    module_doc = sys.modules[cls.__module__].__doc__ or ""
    assert "§" in module_doc and "§" in (cls.__doc__ or "") + module_doc
    assert cls.__doc__, f"{cls.__name__} has no docstring"


def test_undeclared_claim_is_an_error():
    claims = posenc.rotary_claims()
    del claims["ROPE-4"]
    with pytest.raises(ValueError, match="leaves claims undeclared: ROPE-4"):
        _minimal_record(claims=claims)


def test_unknown_claim_is_an_error():
    with pytest.raises(ValueError, match="unknown claims: ROPE-99"):
        posenc.rotary_claims({"ROPE-99": posenc.HOLDS})


def test_refutation_and_not_applicable_need_reasons():
    with pytest.raises(ValueError, match="needs a reason"):
        posenc.refuted("")
    with pytest.raises(ValueError, match="needs a reason"):
        posenc.not_applicable("")
    with pytest.raises(ValueError, match="only a refutation"):
        posenc.Declared(State.HOLDS, "x", ("test_a",))


def test_missing_tolerance_is_an_error():
    with pytest.raises(ValueError, match="no tolerance declared for torch.float64"):
        _minimal_record(tolerances={torch.float32: posenc.DEFAULT_TOLERANCES[torch.float32]})


def test_duplicate_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        posenc.register(dataclasses.replace(BUILTINS[0]))


def test_register_and_unregister_a_plugin_record():
    record = posenc.register(_minimal_record(name="test_registry_rope"))
    try:
        assert posenc.get("test_registry_rope") is record
    finally:
        posenc.unregister("test_registry_rope")
    with pytest.raises(KeyError, match="no encoder named 'test_registry_rope'"):
        posenc.get("test_registry_rope")


@pytest.mark.parametrize("record", BUILTINS, ids=lambda r: r.name)
def test_aimed_refutations_name_specs_of_that_claim(record):
    for claim, declared in record.claims.items():
        names = {s.name for s in SPECS if s.claim == claim}
        assert set(declared.specs) <= names, f"{record.name} {claim}: {declared.specs} not among {names}"


@pytest.mark.parametrize("record", BUILTINS, ids=lambda r: r.name)
def test_every_applicable_claim_has_a_spec_for_this_kind(record):
    for claim in CLAIMS:
        if record.applies(claim):
            kinds = [s.kinds for s in SPECS if s.claim == claim]
            assert any(k is None or record.kind in k for k in kinds), f"{record.name}: no spec runs {claim}"


@pytest.mark.parametrize("record", BUILTINS, ids=lambda r: r.name)
def test_every_refutation_has_a_spec_that_runs_on_this_encoder(record):
    """A declared refutation must be observable: some spec of the claim accepts this encoder's kind
    and takes a record (so its outcome reaches the matrix)."""
    for claim, declared in record.claims.items():
        if declared.status != State.REFUTED:
            continue
        runnable = [s for s in SPECS if s.claim == claim and s.takes_record
                    and (s.kinds is None or record.kind in s.kinds)]
        assert runnable, f"{record.name}: {claim} is declared refuted but no spec runs it"
        if declared.specs:
            assert set(declared.specs) <= {s.name for s in runnable}, (record.name, claim, declared.specs)


def test_registration_rejects_a_spec_name_no_spec_of_the_claim_has():
    wrong = posenc.rotary_claims({"ROPE-2": posenc.refuted("aimed at a spec of ROPE-1", specs=("test_rotations_compose",))})
    with pytest.raises(ValueError, match="ROPE-2 is aimed at test_rotations_compose, which is no spec of it; "
                                         "the specs of ROPE-2: test_frequencies_follow_the_formula"):
        posenc.register(_minimal_record(name="aimed_at_another_claim", claims=wrong))
    typo = posenc.rotary_claims({"ROPE-2": posenc.refuted("a typo", specs=("test_frequencies_follow_the_formla",))})
    with pytest.raises(ValueError, match="test_frequencies_follow_the_formla, which is no spec of it"):
        posenc.register(_minimal_record(name="typo", claims=typo))
    assert "typo" not in {r.name for r in posenc.records()}
    right = posenc.rotary_claims({"ROPE-2": posenc.refuted("aimed right", specs=("test_frequencies_follow_the_formula",))})
    posenc.register(_minimal_record(name="aimed_right", claims=right))
    posenc.unregister("aimed_right")


def test_a_plugin_file_with_an_unknown_spec_name_is_refused_with_its_line(tmp_path):
    plugin = tmp_path / "typo.py"
    plugin.write_text("import posenc\n\nposenc.register(posenc.EncoderRecord(\n"
                      "    name='typo_plugin', build=lambda c: posenc.RotaryEmbedding(c.head_dim), kind='rotary',\n"
                      "    source='test', geometry=posenc.RotaryGeometry(),\n"
                      "    claims=posenc.rotary_claims({'ROPE-4': posenc.refuted('x', specs=('test_no_such_spec',))})))\n")
    with pytest.raises(posenc.harness.catalogue.registry.PluginError, match=r"typo.py:3: ValueError: .*test_no_such_spec"):
        posenc.load_plugin(plugin)


def test_flat_fields_reach_their_groups_and_read_back():
    record = _minimal_record(name="grouped", protocol="pair", max_position=4096, dtypes=(torch.float32,))
    assert record.calling.protocol == "pair" and record.protocol == "pair"
    assert record.limits.max_position == 4096 and record.max_position == 4096
    assert dataclasses.replace(record, max_position=64).limits == dataclasses.replace(record.limits, max_position=64)
    with pytest.raises(TypeError, match="unexpected fields"):
        _minimal_record(max_positon=4096)
