"""The upstream defects the harness finds in the pinned versions: cells that must read FAIL.

``tests/test_ecosystem.py`` requires a run of every ecosystem record to show exactly these
(encoder, claim) cells as FAIL and nothing else red; the findings page's table is rendered from
them and the records' declarations (``python -m posenc docs``). What each one is, with a
standalone reproducer, is on that page and in the test module's docstring.
"""

from __future__ import annotations

#: rotary-embedding-torch forms positions in the input's dtype: wrong in bf16 / fp16 from 257 / 2049.
HALF_PRECISION_POSITIONS = frozenset({"ROPE-1", "ROPE-4", "ROPE-8", "ROPE-11"})
#: ``module.to(torch.bfloat16)`` rounds θ in these records (PATH-3).
CAST_ROUNDS_FREQUENCIES = ("ret_rope", "ret_interpolate", "hf_default", "hf_linear", "hf_dynamic", "hf_yarn",
                           "hf_llama3", "hf_longrope", "xtf_rope", "xtf_xpos")

#: The same cast rounding in transformers' multi-axis rotary classes (``transformers_mrope``): their
#: ``inv_freq`` and ``original_inv_freq`` are float buffers too. The published Qwen3.5 quarter
#: (``hf_qwen3_5_mrope``) is not judged at the specs' head_dim 16, so PATH-3 is not run on it.
MULTIAXIS_CAST_ROUNDS_FREQUENCIES = ("hf_qwen2vl_mrope", "hf_qwen2_5vl_mrope", "hf_qwen3vl_mrope",
                                     "hf_qwen3_5_half_mrope", "hf_glm4v_mrope", "hf_glm4v_moe_mrope",
                                     "hf_ernie4_5vl_mrope", "hf_qwen2vl_vision_rope2d", "hf_pixtral_rope2d")
#: The multi-axis records' FAIL cells, and the records their own run selects.
MULTIAXIS_FINDINGS: frozenset[tuple[str, str]] = frozenset(
    (name, "PATH-3") for name in MULTIAXIS_CAST_ROUNDS_FREQUENCIES)
MULTIAXIS_ENCODERS = "hf_*_mrope,hf_*_rope2d"

#: transformers 5.24's Qwen2-VL and Qwen2.5-VL resume text after a video at ``start + max(h, w)``, below the
#: video's own time ids when they run further (VLM-3: the papers' rule is the largest id plus one).
VLM_RESUME_BELOW_VIDEO_TIME = ("vlm_qwen2_vl", "vlm_qwen2_5_vl")
#: A forward whose chunk brings a picture after cached tokens gives it wrong ids, with no error (VLM-6): from 0
#: after a text-only cache, text ids plus the old delta after a cache that holds a picture.
VLM_LATER_CHUNK_PICTURE = ("vlm_qwen2_vl", "vlm_qwen2_5_vl", "vlm_qwen3_vl", "vlm_glm4v")
#: A decode step through ``forward`` with an attention mask, after a prompt holding a picture (padded or not),
#: builds ids for the whole mask, cache included, and the attention fails on the sizes (VLM-4); the prompt,
#: ``generate`` and the step without a mask are right.
VLM_PADDED_DECODE_FAILS = ("vlm_qwen2_vl", "vlm_qwen2_5_vl", "vlm_qwen3_vl", "vlm_glm4v")
#: The vision-language models' FAIL cells, and the records their own run selects.
VLM_FINDINGS: frozenset[tuple[str, str]] = frozenset(
    {*((name, "VLM-3") for name in VLM_RESUME_BELOW_VIDEO_TIME),
     *((name, "VLM-4") for name in VLM_PADDED_DECODE_FAILS),
     *((name, "VLM-6") for name in VLM_LATER_CHUNK_PICTURE)})
VLM_ENCODERS = "vlm_*"

#: transformers 5.24's ``get_rope_index`` of Qwen2-VL and Qwen2.5-VL, called on its own: text after a video
#: resumes at ``start + max(h, w)``, below the video's time ids (IDS-3); where the time ids run past the text's
#: at the row's end, the row's delta no longer continues the row (IDS-6).
PRODUCER_FINDINGS: frozenset[tuple[str, str]] = frozenset(
    {(name, claim) for name in ("tf_ids_qwen2_vl", "tf_ids_qwen2_5_vl") for claim in ("IDS-3", "IDS-6")})
PRODUCER_ENCODERS = "tf_ids_*,tf_vision_grid,tf_flattening,packed_torchtune,megatron_reset_ids,torch_cp_*"

FINDINGS: frozenset[tuple[str, str]] = frozenset({
    ("hf_dynamic", "ROPE-9"), ("torchtune_rope", "contract"),
    *{("ret_rope", claim) for claim in HALF_PRECISION_POSITIONS | {"ROPE-9", "contract"}},
    *{("ret_interpolate", claim) for claim in HALF_PRECISION_POSITIONS | {"ROPE-14", "ROPE-9", "contract"}},
    ("ret_xpos", "PATH-2"), ("ret_xpos", "ROPE-9"),
    *{(name, "PATH-3") for name in CAST_ROUNDS_FREQUENCIES},
    *MULTIAXIS_FINDINGS,  # ENCODERS' hf_* selects the multi-axis records too
})
#: The records the ecosystem run selects.
ENCODERS = "hf_*,torchtune_*,xtf_*,ret_*"

#: transformers' architectures whose ``model.to(torch.bfloat16)`` rounds the rotary ``inv_freq`` buffer, so
#: that a query far from its keys turns by the wrong angles (MODEL-6); dynamic NTK recomputes θ in float32.
MODEL_CAST_ROUNDS_FREQUENCIES = ("lm_llama", "lm_llama_linear", "lm_llama_yarn", "lm_llama3",
                                 "lm_mixtral", "lm_qwen2", "lm_phi3_longrope", "lm_qwen3", "lm_gemma", "lm_gemma2",
                                 "lm_gemma3", "lm_gpt_neox",
                                 "lm_falcon", "lm_stablelm", "lm_olmo2", "lm_cohere", "lm_starcoder2", "lm_deepseek_v3")
#: The same cast rounding on the unusual architectures, and on dynamic NTK at a realistic maximum
#: (4096): its θ is recomputed in float32 only past the maximum, so a query at 3000 turns with the
#: rounded buffer (the tiny maximum of 32 hid this).
MODEL_CAST_ROUNDS_MORE = ("lm_llama_dynamic_4k", "lm_phi3_longrope_4k", "lm_smollm3", "lm_gpt_oss", "lm_deepseek_v2", "lm_minicpm3", "lm_bamba", "lm_falcon_h1",
                          "lm_granitemoehybrid", "lm_qwen3_next", "lm_lfm2", "lm_glm", "lm_glm4", "lm_ernie4_5",
                          "lm_persimmon", "lm_hunyuan_ntk_alpha", "lm_olmo3", "lm_gemma3n_text", "lm_seed_oss",
                          "lm_apertus", "lm_arcee", "lm_dots1")
#: Past ``n_positions`` / ``max_seq_len`` an error that names no limit (MODEL-7).
MODEL_UNCLEAR_LIMIT = ("lm_gpt2", "lm_gptj", "lm_mpt")
#: A cache kept across a rescaling threshold: dynamic NTK's keys keep the base of their call, and
#: Phi-3's longrope keeps short-factor keys (its generate drops the cache; a forward with a cache
#: does not): a decode step (MODEL-2) and a chunk (MODEL-3) past it differ from a fresh pass on
#: their prefix (transformers #25104's class).
MODEL_STALE_CACHE = ("lm_llama_dynamic", "lm_llama_dynamic_4k", "lm_phi3_longrope", "lm_phi3_longrope_4k")
#: Bamba: a chunk that continues a cache without position ids differs from the full pass; with
#: position ids it matches (the model's own positions of a multi-token continuation).
MODEL_OWN_CHUNK_POSITIONS = ("lm_bamba",)
#: Bamba: a decode step through forward without position ids (the next id and the cache) takes
#: its position from the cache length of a Mamba layer, 0; given positions and generate are right.
MODEL_BARE_DECODE_POSITIONS = ("lm_bamba",)
#: gpt-oss: its mask ignores position ids that restart, so packed documents attend each other.
MODEL_PACKING_IGNORED = ("lm_gpt_oss",)
MODEL_FINDINGS: frozenset[tuple[str, str]] = frozenset({
    *{(name, "MODEL-6") for name in (*MODEL_CAST_ROUNDS_FREQUENCIES, *MODEL_CAST_ROUNDS_MORE)},
    *{(name, "MODEL-7") for name in MODEL_UNCLEAR_LIMIT},
    *{(name, claim) for name in MODEL_STALE_CACHE for claim in ("MODEL-2", "MODEL-3")},
    *{(name, "MODEL-3") for name in MODEL_OWN_CHUNK_POSITIONS},
    *{(name, "MODEL-2") for name in MODEL_BARE_DECODE_POSITIONS},
    *{(name, "MODEL-8") for name in MODEL_PACKING_IGNORED},
})
#: Cells no run can decide here, with why: the relation shows no teeth on that model.
MODEL_UNDECIDED: dict[tuple[str, str], str] = {
    ("lm_llama4_text", "MODEL-6"): "chunked attention of 8 and a NoPE layer: a query far from its keys attends "
                                   "only its own chunk, so its distance to them moves nothing",
}
#: The model records the model run selects, and the matrix of its last run kept for the docs.
MODEL_ENCODERS = "lm_*"
MODEL_MEASURED = "docs/measurements/model-matrix.json"


#: The matrix of the last ecosystem run kept for the docs (``python -m posenc docs --ecosystem-json``).
MEASURED = "docs/measurements/ecosystem-matrix.json"


def kept_matrix(verdicts: dict) -> dict:
    """What the docs keep of an ecosystem run's ``verdicts.json``: its header's versions and matrix, of
    the records with one position per token (the multi-axis group is judged on claims of its own), and
    without the VLM relations (vision-language models have a run of their own, ``VLM_ENCODERS``)."""
    kinds = verdicts.get("kinds", {})
    names = [name for name in verdicts["header"]["encoders"] if kinds.get(name) != "multiaxis"]
    return {"libraries": verdicts["header"].get("libraries", {}), "torch": verdicts["header"].get("torch"),
            "matrix": {claim: {name: row[name] for name in names} for claim, row in verdicts["matrix"].items()
                       if not claim.startswith("VLM-")}}


def table_markdown(path=MEASURED) -> str:
    """Claims × ecosystem records as the kept run observed them; a finding's cell in bold."""
    import json
    from pathlib import Path

    from posenc.harness.catalogue.states import SURPRISES, State

    kept = json.loads(Path(path).read_text())
    matrix = kept["matrix"]
    names = list(next(iter(matrix.values())))
    versions = ", ".join(f"{name} {version}" for name, version in kept["libraries"].items())
    lines = [f"Observed by a run of `--plugin posenc.ecosystem --encoders '{ENCODERS}'` ({versions}; "
             f"torch {kept['torch']}):", "",
             "| claim | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    for claim, row in matrix.items():
        cells = [f"**{row[n]}**" if State(row[n]) in SURPRISES else str(row[n]) for n in names]
        if any(State(row[n]) != State.NA for n in names):
            lines.append(f"| {claim} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def model_table_markdown(path=MODEL_MEASURED) -> str:
    """Architectures × model relations as the kept run observed them; a finding's cell in bold."""
    import json
    from pathlib import Path

    from posenc.harness.catalogue.states import SURPRISES, State

    kept = json.loads(Path(path).read_text())
    matrix = {claim: row for claim, row in kept["matrix"].items() if claim.startswith("MODEL-") or claim == "contract"}
    names = list(next(iter(matrix.values())))
    versions = ", ".join(f"{name} {version}" for name, version in kept["libraries"].items() if name == "transformers")
    lines = [f"Observed by a run of `--plugin posenc.ecosystem --encoders '{MODEL_ENCODERS}'` ({versions}; "
             f"torch {kept['torch']}): {len(names)} models.", "",
             "| model | " + " | ".join(matrix) + " |", "|---|" + "---|" * len(matrix)]
    for name in names:
        cells = [f"**{row[name]}**" if State(row[name]) in SURPRISES else str(row[name]) for row in matrix.values()]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
