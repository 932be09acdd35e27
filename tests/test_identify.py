"""``identify`` reads a RoPE's geometry off its outputs: on every built-in rotary encoder it recovers
the layout, the rotated width, the frequency family with its parameters, and the scale."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch

import posenc
from posenc.harness.references.protocols import build_subject
from posenc.harness.identify.identification import identify
from posenc.harness.catalogue.states import State

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(d_model=64, n_heads=4, max_len=128)  # head_dim 16

#: name -> (layout, rotated width, family, parameters that must be recovered)
EXPECTED = {
    "rope_interleaved": ("interleaved", 16, "default", {"base": 10000.0}),
    "rope_complex": ("interleaved", 16, "default", {"base": 10000.0}),
    "rope_compiled": ("interleaved", 16, "default", {"base": 10000.0}),
    "rope_inplace": ("interleaved", 16, "default", {"base": 10000.0}),
    "rope_half_split": ("half_split", 16, "default", {"base": 10000.0}),
    "rope_concatenated": ("concatenated", 16, "default", {"base": 10000.0}),
    "rope_cos_sin": ("half_split", 16, "default", {"base": 10000.0}),
    "rope_xpos": ("interleaved", 16, "default", {"base": 10000.0}),
    "rope_partial": ("half_split", 4, "default", {"base": 10000.0}),
    "rope_linear_scaled": ("interleaved", 16, "linear", {"factor": 4.0, "base": 10000.0}),
    "rope_yarn": ("interleaved", 16, "yarn", {"factor": 4.0, "original_max_position": 2048, "base": 10000.0}),
    "rope_llama3": ("interleaved", 16, "llama3", {"factor": 8.0, "original_max_position": 8192, "base": 10000.0}),
    "rope_dynamic_ntk": ("interleaved", 16, "default", {"base": 10000.0}),
}


def _identified(name: str):
    record = posenc.get(name)
    return record, identify(build_subject(record, **CONFIG), head_dim=16, base=10000.0)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_identify_recovers_the_builtin_geometry(name):
    record, found = _identified(name)
    layout, rotated, family, parameters = EXPECTED[name]
    assert (found.layout, found.rotary_dim, found.family) == (layout, rotated, family), found.report()
    for key, value in parameters.items():
        assert found.parameters[key] == pytest.approx(value, rel=1e-6), (key, found.report())
    assert found.magnitude == pytest.approx(record.geometry.magnitude, rel=1e-5)


def test_every_builtin_rotary_on_heads_is_identified():
    heads = {r.name for r in posenc.records() if r.kind == "rotary" and r.input_layout == "bshd"
             and r.origin == "built-in" and r.geometry is not None and r.applies("ROPE-1")
             and r.positions != "none"  # identify reads positions; the published snippets take none
             and r.group != "multiaxis"}  # read per axis: test_identify_reads_the_axis_sections_of_a_multi_axis_rope
    assert heads - set(EXPECTED) <= {"rope_ntk_aware", "rope_longrope"}, heads - set(EXPECTED)


def test_ntk_aware_is_named_against_its_nominal_base():
    _, found = _identified("rope_ntk_aware")
    assert found.family == "default" and any("NTK-aware with factor 4" in note for note in found.notes), found.report()


def test_a_scale_and_a_length_dependent_schedule_are_named():
    _, xpos = _identified("rope_xpos")
    assert xpos.scale_by_position and not _identified("rope_interleaved")[1].scale_by_position
    _, dynamic = _identified("rope_dynamic_ntk")
    assert any("depends on the position or the call's length" in note for note in dynamic.notes), dynamic.report()


def _linear_frequencies(x, positions):
    """A rotation of interleaved pairs at θ_i = 1 / (1 + i): self-consistent, of no known family."""
    theta = 1.0 / (1.0 + torch.arange(8, dtype=torch.float64))
    angles = positions.to(torch.float64)[:, None] * theta
    a, b = x[..., 0::2], x[..., 1::2]
    cos, sin = angles.cos()[None, :, None], angles.sin()[None, :, None]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


def test_a_self_consistent_rope_that_is_not_the_formula_is_custom():
    """A RoPE with linearly spaced frequencies is a rotation, but of no known family."""

    found = identify(_linear_frequencies, head_dim=16)
    assert (found.layout, found.family) == ("interleaved", "custom"), found.report()
    assert found.theta[:3] == pytest.approx([1.0, 0.5, 1 / 3], rel=1e-9)


def test_the_command_line_prints_a_report_and_a_geometry(tmp_path):
    target = tmp_path / "my_rope.py"
    target.write_text("import posenc\nrope = posenc.RotaryEmbedding(32, layout='half_split', scaling_factor=2.0)\n")
    shown = subprocess.run([sys.executable, "-m", "posenc", "identify", f"{target}:rope", "--head-dim", "32"],
                           cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "layout:          half_split" in shown.stdout and "linear (factor=2, base=10000)" in shown.stdout
    assert "geometry=posenc.RotaryGeometry(layout='half_split', scaling_factor=2, base=10000" in shown.stdout
    code = shown.stdout[shown.stdout.index("# save as a plug-in"):shown.stdout.index("\n))\n") + 3]
    plugin = tmp_path / "identified_plugin.py"
    plugin.write_text(code)
    loaded = subprocess.run([sys.executable, "-c", f"import posenc; print(posenc.load_plugin({str(plugin)!r}))"],
                            cwd=ROOT, capture_output=True, text=True)
    assert loaded.returncode == 0 and "EncoderRecord('rope')" in loaded.stdout, loaded.stderr[-2000:]


def test_a_cos_sin_target_prints_a_plugin_file_that_runs_its_specs(tmp_path, posenc_here):
    """The cos/sin protocol needs ``apply``: the generated plug-in carries it, and pytest runs it."""
    target = tmp_path / "cos_sin_rope.py"
    target.write_text("import posenc\nrope = posenc.CosSinRotaryEmbedding(16)\napply = posenc.apply_rotary_cos_sin\n")
    shown = posenc_here("identify", f"{target}:rope", "--protocol", "cos_sin", "--apply", "apply")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-2000:]
    code = shown.stdout[shown.stdout.index("# save as a plug-in"):shown.stdout.index("\n))\n") + 3]
    assert "protocol='cos_sin'" in code and "apply=apply" in code
    plugin = tmp_path / "identified_cos_sin.py"
    plugin.write_text(code)
    ran = subprocess.run([sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--plugin",
                          str(plugin), "--encoders", "rope", "-k", "test_rotation_preserves_norm",
                          "--matrix-dir", str(tmp_path / "reports")], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0 and " passed" in ran.stdout.splitlines()[-1], ran.stdout[-2000:]





@pytest.fixture(scope="module")
def defects():
    """The defective plug-ins' records, read without registering them here."""
    import importlib.util
    from unittest import mock

    found = {}
    for file in ("defective_ropes.py", "bf16_angle_rope.py"):
        spec = importlib.util.spec_from_file_location(f"identify_{file[:-3]}", ROOT / "tests" / "plugins" / file)
        module = importlib.util.module_from_spec(spec)
        with mock.patch.object(posenc, "register", side_effect=lambda r: found.setdefault(r.name, r)):
            spec.loader.exec_module(module)
    return found


def _identify_record(record):
    return identify(build_subject(record, **CONFIG), head_dim=16, base=10000.0)


@pytest.mark.parametrize("name, field, words", [
    ("bug_dtype_polluted_cache", "state", "depends on history: positions 0 … 259 change by"),
    ("bug_history_at_max_len", "state", "depends on history"),
    ("bug_offset_in_input_dtype", "notes", "the offset path differs from explicit positions in bfloat16"),
    ("bug_table_index_error", "limit", "raises at position 257: IndexError"),
    ("user_rope_bf16_angles", "notes", "positions are rounded before the angles are formed"),
    ("user_rope_bf16_angles", "notes", "θ is base^(−2i/d) rounded to bfloat16"),
])
def test_identify_names_the_anomaly_of_each_defective_plugin(defects, name, field, words):
    found = _identify_record(defects[name])
    said = getattr(found, field)
    said = " | ".join(said) if isinstance(said, list) else said
    assert words in said, found.report()


def test_a_correct_rope_shows_no_anomaly():
    _, found = _identified("rope_interleaved")
    assert found.state.startswith("no dependence on history") and not found.notes, found.report()
    assert all("fp32 or wider" in said for said in found.precision.values()), found.precision


def test_pytest_identify_runs_every_spec_against_what_a_bare_function_computes(tmp_path):
    """A half-split RoPE with base 500000 is self-consistent, not the default formula: identified, it is
    judged against its own geometry. Only the contract row fails: the bare function checks no input."""
    target = tmp_path / "my_rope.py"
    target.write_text(
        "import torch\n\n\ndef apply_rope(x, positions):\n    d = x.shape[-1]\n"
        "    theta = 1.0 / (500000.0 ** (torch.arange(0, d, 2).float() / d))\n"
        "    angles = positions.float()[..., None] * theta\n"
        "    cos, sin = angles.cos()[..., None, :], angles.sin()[..., None, :]\n"
        "    a, b = x[..., : d // 2].float(), x[..., d // 2 :].float()\n"
        "    return torch.cat((a * cos - b * sin, a * sin + b * cos), -1).to(x.dtype)\n")
    out = tmp_path / "reports"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("POSENC_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", "--identify",
                           f"{target}:apply_rope", "--encoders", "identified_*", "--matrix-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert "identified_apply_rope, as identified from its outputs:" in done.stdout, done.stdout[-2000:]
    assert "frequencies:     default (base=500000)" in done.stdout
    matrix = __import__("json").loads((out / "verdicts.json").read_text())["matrix"]
    row = {claim: cells["identified_apply_rope"] for claim, cells in matrix.items()}
    assert row.pop("contract") == State.UNEXPECTEDLY_FAILING
    assert set(row.values()) <= {State.HOLDS, State.REFUTED, State.NA}, {c: s for c, s in row.items() if s not in (State.HOLDS, State.NA)}
    assert row["ROPE-13"] == State.REFUTED and row["ROPE-4"] == State.HOLDS


def test_every_spec_honours_an_identified_records_fixed_head_dim(tmp_path):
    """A target of one size (head_dim 16): the gradient check and the perf workload build that size."""
    target = tmp_path / "fixed16.py"
    target.write_text("import posenc\nrope = posenc.RotaryEmbedding(16)\n")
    ran = subprocess.run([sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--identify",
                          f"{target}:rope", "--encoders", "identified_rope", "-k", "gradcheck or workload",
                          "--matrix-dir", str(tmp_path / "reports")], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.splitlines()[-1].startswith("2 passed"), ran.stdout[-2000:]


LLAMA_CAST_TO_BF16 = '''
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

config = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=4096,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
rope = LlamaRotaryEmbedding(config).to(torch.bfloat16)  # what model.to(torch.bfloat16) does to it


def apply(q, k, cos, sin):
    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
'''


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # transformers' imports of other libraries
def test_identify_names_theta_rounded_by_a_cast_and_judges_the_intended_schedule(tmp_path, posenc_here):
    """transformers' Llama RoPE after .to(bfloat16): identify names the rounding as an anomaly, and
    ``--identify`` judges the intended θ, so the formula's rotation (ROPE-8) fails instead of holding for the
    rounded one."""
    pytest.importorskip("transformers")
    target = tmp_path / "llama_bf16.py"
    target.write_text(LLAMA_CAST_TO_BF16)
    shown = posenc_here("identify", f"{target}:rope", "--protocol", "cos_sin", "--apply", "apply")
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("frequencies:"))
    assert "default (base=10000)" in lines[at] and "ANOMALY:       θ rounded to bfloat16" in lines[at + 1], lines[at:at + 2]
    ran = subprocess.run([sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--identify",
                          f"{target}:rope", "--identify-protocol", "cos_sin", "--identify-apply", "apply",
                          "--encoders", "identified_rope",
                          "-k", "test_rotation_matches_the_formula_with_per_batch_positions",
                          "--matrix-dir", str(tmp_path / "reports")], cwd=ROOT, capture_output=True, text=True)
    matrix = json.loads((tmp_path / "reports" / "verdicts.json").read_text())["matrix"]
    assert matrix["ROPE-1"]["identified_rope"] == State.UNEXPECTEDLY_FAILING, ran.stdout[-3000:]  # θ_i of the formula


WRONG_SCHEDULES = '''
import posenc
from posenc.encoders.scaling import frequencies as schedules


def _inverted_ramp(d, base):
    plain = schedules.default(d, base)
    keep = (schedules.yarn(d, base, factor=4.0, original_max_position=2048) * 4 - plain) / (plain * 3)
    return plain * (1 - keep) + plain / 4 * keep  # fast pairs interpolated, slow ones kept


inverted_yarn = posenc.RotaryEmbedding(16, frequencies=_inverted_ramp)
fraction_ignored = posenc.RotaryEmbedding(16)
yarn = posenc.RotaryEmbedding(16, frequencies=lambda d, b: schedules.yarn(d, b, factor=4.0, original_max_position=2048))
'''


def test_expect_catches_a_consistent_rotation_with_the_wrong_schedule_or_width(tmp_path, posenc_here):
    """An inverted YaRN ramp and an ignored rotary fraction are rotations, so every claim holds for
    the measured geometry; ``--expect`` compares with what the library documents instead."""
    target = tmp_path / "wrong_schedules.py"
    target.write_text(WRONG_SCHEDULES)
    identify_cli = partial(posenc_here, "identify")
    inverted = identify_cli(f"{target}:inverted_yarn", "--expect", "yarn:factor=4,original_max_position=2048")
    assert inverted.returncode == 1 and "MISMATCH:      θ differs at pairs" in inverted.stdout, inverted.stdout
    assert "partial(schedules.yarn, factor=4, original_max_position=2048)" in inverted.stdout  # judged against it
    ignored = identify_cli(f"{target}:fraction_ignored", "--expect", "default:rotary_fraction=0.5")
    assert ignored.returncode == 1 and "rotated width: measured 16 of 16, documented 8" in ignored.stdout
    right = identify_cli(f"{target}:yarn", "--expect", "yarn:factor=4,original_max_position=2048")
    assert right.returncode == 0 and "yarn:factor=4,original_max_position=2048: matches" in right.stdout
    unknown = identify_cli(f"{target}:yarn", "--expect", "yarm:factor=4")
    assert unknown.returncode == 2 and "unknown family 'yarm'" in unknown.stderr
    ran = subprocess.run([sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--identify",
                          f"{target}:inverted_yarn", "--identify-expect", "yarn:factor=4,original_max_position=2048",
                          "--encoders", "identified_inverted_yarn",
                          "-k", "test_rotation_matches_the_formula_with_per_batch_positions",
                          "--matrix-dir", str(tmp_path / "reports")], cwd=ROOT, capture_output=True, text=True)
    matrix = json.loads((tmp_path / "reports" / "verdicts.json").read_text())["matrix"]
    assert matrix["ROPE-1"]["identified_inverted_yarn"] == State.UNEXPECTEDLY_FAILING, ran.stdout[-3000:]


@pytest.mark.parametrize("schedule, family, parameters", [
    ("yarn", "yarn", {"factor": 4.0, "original_max_position": 131072}),  # past the old grid's 32768
    ("yarn", "yarn", {"factor": 40.0, "original_max_position": 4096, "truncate": False}),
    ("llama3", "llama3", {"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                          "original_max_position": 8192}),  # Llama 4: one edge
])
def test_long_context_settings_are_named_with_their_parameters(schedule, family, parameters):

    from posenc.encoders.scaling import frequencies as schedules

    rope = posenc.RotaryEmbedding(64, frequencies=partial(getattr(schedules, schedule), **parameters))
    found = identify(lambda x, p: rope(x, p), head_dim=64, base=10000.0)
    assert found.family == family and found.parameters == {**parameters, "base": 10000.0}, found.report()


def test_a_fitted_parameter_keeps_every_digit_the_measurement_supports():
    """A factor of 4.87605 rounded to 4.876 turns the angle at position 5000 by about 1e-2 rad."""
    rope = posenc.RotaryEmbedding(16, scaling_factor=4.87605)
    found = identify(lambda x, p: rope(x, p), head_dim=16)
    assert found.parameters == {"factor": 4.87605, "base": 10000.0}, found.report()
    assert "scaling_factor=4.87605" in found.geometry_code()

    from posenc.encoders.scaling import frequencies as schedules

    ntk = posenc.RotaryEmbedding(16, frequencies=partial(schedules.ntk_aware, factor=4.87605))
    found = identify(lambda x, p: ntk(x, p), head_dim=16, base=10000.0)
    fitted = schedules.default(16, found.parameters["base"])
    assert float((fitted - schedules.ntk_aware(16, 10000.0, factor=4.87605)).abs().max()) * 5000 < 1e-5


def test_a_cos_sin_pair_that_is_no_rotation_is_an_anomaly_not_xpos():
    """sin at half its size: each pair's map is a scaled rotation whose scale oscillates with the angle."""

    def half_sine(x, positions):
        theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
        angles = positions.to(torch.float64)[..., None] * theta
        angles = torch.cat((angles, angles), -1)
        return angles.cos().to(x.dtype), (0.5 * angles.sin()).to(x.dtype)

    found = identify(half_sine, protocol="cos_sin", head_dim=16, apply=posenc.apply_rotary_cos_sin)
    assert found.not_rotation and "no constant or geometric scale" in found.not_rotation, found.report()
    assert "xPos" not in found.report() and "ANOMALY:       not a rotation" in found.report(), found.report()
    from posenc.harness.identify.identification import identified_record

    assert identified_record(found, "r", build=None, protocol="cos_sin", apply=posenc.apply_rotary_cos_sin) \
        .claims["ROPE-3"].status == State.HOLDS  # a defect is not declared away
    _, xpos = _identified("rope_xpos")
    assert xpos.not_rotation is None and "geometrically (xPos-like)" in " ".join(xpos.report().split())


def test_the_concatenated_layout_reads_its_angle_precision():
    """litgpt's interleaved variant leaves its outputs de-interleaved: the precision is read on the
    rotation, not on the output permutation (once read as a 3.08 rad phase error)."""
    _, found = _identified("rope_concatenated")
    assert found.layout == "concatenated"
    assert all("fp32 or wider" in said for said in found.precision.values()), found.precision


def test_a_custom_familys_plugin_declares_the_measured_frequencies():
    found = identify(_linear_frequencies, head_dim=16)
    code = found.geometry_code()
    assert "frequencies=lambda rotary_dim, base: torch.tensor([1.0, 0.5" in code, code
    assert eval(code.split("frequencies=")[1].split(", magnitude")[0].split(", angle_dtype")[0])(16, 1.0)[1] == 0.5


# ---------------------------------------------------------------- --identify on what is no RoPE

NOT_ROPES = ROOT / "tests" / "plugins" / "not_ropes.py"
#: name -> what the one line of its start-up error says
NOT_A_ROPE = {
    "identity": "not a RoPE: the map moves no pair of coordinates by a rotation: at positions 0 and 64 it is the "
                "identity (its output does not depend on the position)",
    "random_linear": "not a RoPE: the map moves no pair of coordinates by a rotation: at positions 0 and 64 it is "
                     "the same linear map, no rotation (its output does not depend on the position)",
    "all_nan": "not a RoPE: its output is not finite: 256 of 256 entries NaN or infinite at position 0",
    "raises": "the target raised on its first probe (float32 input of shape (1, 16, 1, 16) at position 1): "
              "RuntimeError: the rotary cache was never built (at tests/plugins/not_ropes.py:",
}


def _environment() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}


def _one_error_line(code: int, stdout: str, stderr: str) -> str:
    """The start-up error's one line, checked to stop pytest as a usage error without a traceback."""
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR:")]
    assert code == 4 and len(errors) == 1, stdout[-1500:] + stderr[-1500:]
    assert "Traceback" not in stderr and "INTERNALERROR" not in stdout + stderr, stderr[-1500:]
    return " ".join(stderr[stderr.find("ERROR:"):].split())  # the error, wrapped to the terminal, as one line


@pytest.fixture(scope="module")
def not_a_rope_start_ups(tmp_path_factory):
    """``pytest specs --identify not_ropes.py:NAME --collect-only`` for each of NOT_A_ROPE, in one
    process (``tests/start_ups.py``): name -> (exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("not_ropes")
    cases = {name: [["--identify", f"{NOT_ROPES.relative_to(ROOT)}:{name}", "--collect-only", "--matrix-dir",
                     str(root / "reports")], {}] for name in NOT_A_ROPE}
    (root / "cases.json").write_text(json.dumps(cases))
    done = subprocess.run([sys.executable, "-m", "tests.start_ups", str(root / "cases.json"),
                           str(root / "results.json")], cwd=ROOT, env=_environment(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((root / "results.json").read_text())


@pytest.mark.parametrize("name", NOT_A_ROPE)
def test_identify_on_what_is_no_rope_stops_the_run_with_one_line_saying_what_it_measured(not_a_rope_start_ups, name):
    """The identity, a fixed random linear map and an all-NaN output were an IndexError; a target that
    raised was 'accepts neither float64 nor float32', its own error hidden."""
    line = _one_error_line(*not_a_rope_start_ups[name])
    assert line.startswith(f"ERROR: --identify tests/plugins/not_ropes.py:{name}: ") and NOT_A_ROPE[name] in line, line
    if name == "raises":
        lines = NOT_ROPES.read_text().splitlines()
        raising = next(i for i, text in enumerate(lines, 1) if "raise RuntimeError" in text)
        assert line.endswith(f"not_ropes.py:{raising} in raises)"), line


def test_identify_on_a_hanging_target_stops_at_the_timeout_with_one_line(tmp_path):
    """A target that never answers hung start-up silently, --timeout or not: each probing call runs
    under pytest-timeout's setting."""
    done = subprocess.run([sys.executable, "-m", "pytest", "specs", "-q", "-p", "no:cacheprovider", "--collect-only",
                           "--timeout", "2", "--identify", f"{NOT_ROPES.relative_to(ROOT)}:hangs",
                           "--matrix-dir", str(tmp_path / "reports")],
                          cwd=ROOT, env=_environment(), capture_output=True, text=True)
    line = _one_error_line(done.returncode, done.stdout, done.stderr)
    assert line == ("ERROR: --identify tests/plugins/not_ropes.py:hangs: no answer within --timeout 2 s from the "
                    "target on float64 input of shape (1, 16, 1, 16) at position 1; it hangs, or needs a longer "
                    "--timeout"), line
    from posenc.harness.identify.identification import ProbeTimeout  # the limit itself: met within about its time

    hangs = runpy.run_path(str(NOT_ROPES))["hangs"]
    started = time.monotonic()
    with pytest.raises(ProbeTimeout, match=r"no answer within 0.5 s from a call of the target on float64 input"):
        identify(hangs, head_dim=16, timeout=0.5)
    assert time.monotonic() - started < 5


def test_the_identify_command_says_what_is_no_rope_in_one_line():
    done = subprocess.run([sys.executable, "-m", "posenc", "identify", f"{NOT_ROPES.relative_to(ROOT)}:identity"],
                          cwd=ROOT, env=_environment(), capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.stderr.strip() == ("error: tests/plugins/not_ropes.py:identity: not a RoPE: the map moves no pair of "
                                   "coordinates by a rotation: at positions 0 and 64 it is the identity (its output "
                                   "does not depend on the position)")


def test_identify_gives_the_range_of_a_parameter_the_outputs_cannot_tell_apart():
    """YaRN's original lengths 65536 and 131072 give one θ at head_dim 16 (its rounded correction
    band is the same), not at head_dim 64: a range there, one value here, never a guess."""
    from posenc.encoders.scaling import frequencies as schedules

    def yarn_rope(head_dim):
        return posenc.RotaryEmbedding(head_dim, frequencies=partial(schedules.yarn, factor=4.0,
                                                                    original_max_position=131072))

    small = identify(yarn_rope(16), head_dim=16)
    assert small.ranges == {"original_max_position": (65536, 131072)}
    assert "frequencies:     yarn (factor=4, original_max_position=65536 … 131072, base=10000)" in small.report()
    assert "original_max_position cannot be told apart at a rotated width of 16: 65536 … 131072" in \
        " ".join(small.report().split())
    assert "schedules.yarn" not in small.geometry_code() and "torch.tensor(" in small.geometry_code()
    large = identify(yarn_rope(64), head_dim=64)
    assert large.ranges == {} and large.parameters["original_max_position"] == 131072
    assert "schedules.yarn, factor=4, original_max_position=131072" in large.geometry_code()


@pytest.mark.parametrize("sections, order, schedule, layout", [
    ((2, 3, 3), "contiguous", "shared", "half_split"),  # Qwen2-VL
    ((4, 2, 2), "interleaved", "shared", "half_split"),  # Qwen3-VL's THW… then T
    ((2, 3, 3), "contiguous", "shared", "interleaved"),  # GLM-4V's adjacent pairs
    ((4, 4), "contiguous", "per_axis", "half_split"),  # axial 2D, each axis its own schedule
])
def test_identify_reads_the_axis_sections_of_a_multi_axis_rope(sections, order, schedule, layout):
    from posenc.encoders.multiaxis import MultiAxisRotaryEmbedding
    from posenc.harness.identify.axes_identification import identify_axes
    from posenc.harness.references.reference import reference_rotation

    module = MultiAxisRotaryEmbedding(16, sections, order=order, schedule=schedule, layout=layout).double()
    found = identify_axes(module, head_dim=16, axes=len(sections))
    assert (found.sections, found.order, found.schedule, found.layout) == (sections, order, schedule, layout)
    geometry = eval(found.geometry_code(), {"posenc": posenc})  # what the report tells a user to declare
    positions = torch.randint(0, 5000, (len(sections), 2, 7), generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 7, 3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = reference_rotation(x, positions, geometry, 16, axis_positions=True)
    assert float((module(x, positions) - expected).abs().max()) < 1e-9


def test_identify_says_when_no_axis_owns_a_pair():
    from posenc.encoders.multiaxis import MixedRotaryEmbedding
    from posenc.harness.identify.axes_identification import identify_axes

    found = identify_axes(MixedRotaryEmbedding(16).double(), head_dim=16, axes=2)
    assert found.order == "other" and found.geometry_code() is None
    assert "some pairs turn with more than one axis: mixed frequencies (RoPE-Mixed)" in found.report()


def test_the_identify_command_reads_axis_sections(tmp_path):
    target = tmp_path / "bare_mrope.py"
    target.write_text("from posenc.encoders.multiaxis import MultiAxisRotaryEmbedding\n\n"
                      "mrope = MultiAxisRotaryEmbedding(16, (2, 3, 3)).double()\n")
    done = subprocess.run([sys.executable, "-m", "posenc", "identify", f"{target}:mrope", "--axes", "3"],
                          cwd=ROOT, env=_environment(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "sections:        (2, 3, 3) pairs, contiguous (shares 2:3:3), shared schedule" in done.stdout
    assert "axis_sections=(2, 3, 3), axis_order='contiguous'" in " ".join(done.stdout.split())


def test_identify_reads_the_sections_of_a_partial_rotary_in_float32():
    """GLM-4V and Qwen3.5 rotate part of each head, and production RoPEs form angles in fp32."""
    from posenc.encoders.multiaxis import MultiAxisRotaryEmbedding
    from posenc.harness.identify.axes_identification import identify_axes

    glm = MultiAxisRotaryEmbedding(32, (2, 3, 3), layout="interleaved", rotary_dim=16)  # float32
    found = identify_axes(lambda x, p: glm(x.float(), p), head_dim=32, axes=3)
    assert (found.rotary_dim, found.sections, found.order, found.layout) == (16, (2, 3, 3), "contiguous", "interleaved")
    assert "rotary_fraction=0.5" in found.geometry_code()
    axial = MultiAxisRotaryEmbedding(16, (4, 4), schedule="per_axis")
    assert identify_axes(lambda x, p: axial(x.float(), p), head_dim=16, axes=2).schedule == "per_axis"


def test_identify_reads_ernies_order_and_refuses_sections_an_interleaving_cannot_fit():
    from posenc.encoders.multiaxis import MultiAxisRotaryEmbedding
    from posenc.harness.identify.axes_identification import identify_axes

    ernie = MultiAxisRotaryEmbedding(16, (2, 3, 3), order="spatial_interleaved", layout="interleaved").double()
    assert identify_axes(ernie, head_dim=16, axes=3).order == "spatial_interleaved"
    with pytest.raises(ValueError, match=r"interleaved sections \(2, 3, 3\) do not fit 8 pairs"):
        posenc.RotaryGeometry(axis_sections=(2, 3, 3), axis_order="interleaved").pair_axes(16)
