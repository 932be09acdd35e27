"""Other libraries' RoPEs, registered as plug-ins: ``pytest specs --plugin posenc.ecosystem``.

Installed with the ``ecosystem`` extra (``pip install -e '.[ecosystem]'``). Each module registers
one record per configuration through the public plug-in API (``posenc.register``), as a user's
file would, and passes the library's own code path through untouched: the adapter only names
the library's arguments (``position_ids``, ``input_pos``, ``unsqueeze_dim``) and never fixes a
dtype, a cache or a bound. Each record declares what the library promises, citing its docs in
``source``; where the design changes a claim on purpose, the declaration says why.

* :mod:`.transformers_rope` - ``LlamaRotaryEmbedding`` and ``apply_rotary_pos_emb``, every rope
  type of ``ROPE_INIT_FUNCTIONS`` (``hf_*``);
* :mod:`.transformers_models` - transformers' causal LMs, built tiny from a config, one per
  architecture and rope type, for the model relations (``lm_*``);
* :mod:`.transformers_mrope` - the multi-axis rotary classes of the vision-language models (M-RoPE of
  Qwen2-VL … Ernie 4.5 VL, the 2D RoPE of Qwen2-VL's and Pixtral's vision towers) with their models'
  apply functions (``hf_*_mrope``, ``hf_*_rope2d``);
* :mod:`.transformers_vlms` - transformers' vision-language models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V), built
  tiny with their vision towers, for the VLM relations (``vlm_*``);
* :mod:`.position_producers` - code that makes position ids: transformers' ``get_rope_index`` of four
  VLM families and its vision-grid ids, ``DataCollatorWithFlattening``, torch's context-parallel load
  balancers (``tf_ids_*``, ``tf_vision_grid``, ``tf_flattening``, ``torch_cp_*``);
* :mod:`.torchtune_rope` - ``RotaryPositionalEmbeddings`` with ``input_pos`` (``torchtune_*``);
* :mod:`.x_transformers_rope` - ``RotaryEmbedding`` with ``apply_rotary_pos_emb`` (``xtf_*``);
* :mod:`.rotary_embedding_torch_rope` - ``RotaryEmbedding.rotate_queries_or_keys`` with an offset (``ret_*``).

A library that is not installed still has its records: every spec on them is skipped with the
install hint, so ``--encoders 'hf_*'`` never errors.
"""

from __future__ import annotations

from . import (  # noqa: F401  (importing registers the records)
    position_producers,
    rotary_embedding_torch_rope,
    torchtune_rope,
    transformers_models,
    transformers_mrope,
    transformers_rope,
    transformers_vlms,
    x_transformers_rope,
)
from .support import library_versions  # noqa: F401
