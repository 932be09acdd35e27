"""Other libraries' position producers, registered as plug-ins (``--plugin posenc.ecosystem``),
each called on its own with no model run and judged on the IDS, PACK and CP claims:

* ``tf_ids_*``: transformers' ``get_rope_index`` of Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4.1V,
  bound to the model's config alone (the method reads nothing else of the model);
* ``tf_vision_grid``: transformers' ``vision_utils.get_vision_position_ids``, the (row, col) ids the
  vision towers of Qwen2.5-VL, Qwen3-VL and GLM-4.1V rotate by;
* ``tf_flattening``: transformers' ``DataCollatorWithFlattening`` (positions, ``cu_seq_lens``,
  ``seq_idx``);
* ``packed_torchtune``: torchtune's ``PackedDataset`` (``input_pos``, ``seq_lens``), its pack
  padded to a multiple of 8;
* ``megatron_reset_ids``: Megatron-core's GPT position ids and mask with resets at each
  end-of-document token (``_get_ltor_masks_and_position_ids``), each document followed by the
  token as its dataset does; the end tokens' columns dropped, the boundaries read off its mask;
* ``torch_cp_*``: the load balancers of torch's context parallelism
  (``torch.distributed.tensor.experimental._context_parallel._load_balancer``) applied to a
  sequence's tokens and ids, their ``restore`` indices as ``restore``.

The configs are transformers_vlms' (merge 2 × 2; Qwen2.5-VL 2 ids a second); Qwen3-VL and GLM-4.1V
split a video into frames framed by timestamps (``time="split"``).
"""

from __future__ import annotations

import types

import posenc
from posenc.harness.catalogue.producer_records import producer_record
from posenc.harness.catalogue.records import ProducerTraits

from .support import ORIGIN, available, missing, version
from .transformers_vlms import CONFIGS, TEXT, TOKENS, VISION

#: record name -> (transformers_vlms config, the model class holding get_rope_index, its time rule)
BUILDERS = {
    "tf_ids_qwen2_vl": ("vlm_qwen2_vl", "Qwen2VLModel", "frames"),
    "tf_ids_qwen2_5_vl": ("vlm_qwen2_5_vl", "Qwen2_5_VLModel", "seconds"),
    "tf_ids_qwen3_vl": ("vlm_qwen3_vl", "Qwen3VLModel", "split"),
    "tf_ids_glm4v": ("vlm_glm4v", "Glm4vModel", "split"),
}


def _get_rope_index(vlm: str, model_class: str):
    def build(config: posenc.BuildConfig):
        import transformers

        config_class, text, vision, _ = CONFIGS[vlm]
        model_config = getattr(transformers, config_class)(text_config={**TEXT, **text}, vision_config={**VISION, **vision},
                                                           **TOKENS)
        holder = types.SimpleNamespace(config=model_config)  # the method reads the config alone
        cls = getattr(transformers, model_class)
        holder.get_vision_position_ids = types.MethodType(cls.get_vision_position_ids, holder)
        return types.MethodType(cls.get_rope_index, holder)

    return build


def _vision_grid(config: posenc.BuildConfig):
    from transformers.vision_utils import get_vision_position_ids

    return lambda grid_thw: get_vision_position_ids(grid_thw, 2)


class _Flattening:
    """``DataCollatorWithFlattening`` with its boundaries under the protocol's names."""

    def __init__(self):
        from transformers import DataCollatorWithFlattening

        self.collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)

    def __call__(self, examples):
        batch = self.collator([{"input_ids": list(e["input_ids"])} for e in examples])
        return {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"],
                "cu_seq_lens": batch["cu_seq_lens_q"], "seq_idx": batch["seq_idx"]}


class _TorchtunePacked:
    """torchtune's ``PackedDataset`` packing the documents into one pack, padded to a multiple of 8;
    its ``seq_lens`` (the padding one of them) as ``cu_seq_lens``."""

    def __call__(self, examples):
        import contextlib
        import io

        import torch
        from torchtune.datasets import PackedDataset

        documents = [{"tokens": list(e["input_ids"]), "labels": list(e["input_ids"])} for e in examples]
        length = sum(len(d["tokens"]) for d in documents)
        with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
            pack = PackedDataset(documents, max_seq_len=-(-length // 8) * 8, padding_idx=0)[0]
        cu = torch.cat((torch.zeros(1, dtype=torch.int32), pack["seq_lens"].cumsum(0).to(torch.int32)))
        return {"input_ids": pack["tokens"][None], "position_ids": pack["input_pos"][None], "cu_seq_lens": cu}


#: The end-of-document token Megatron's documents end with here (no document's token).
EOD = 2


class _MegatronResetIds:
    """Megatron-core's position ids reset after each end-of-document token, on the documents each
    followed by that token; the end tokens' columns dropped and the documents' starts read off its
    attention mask (a token that may not see the one before it starts a document)."""

    def __call__(self, examples):
        import warnings

        import torch

        with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed": not ours to say
            warnings.simplefilter("ignore")
            from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids

        row = torch.tensor([t for e in examples for t in (*e["input_ids"], EOD)])
        mask, _, positions = _get_ltor_masks_and_position_ids(row, EOD, True, True, False, True)
        blocked = mask[0]  # True: may not attend
        kept = row != EOD
        starts = [0] + [i for i in range(1, len(row)) if blocked[i, i - 1]]
        seq_idx = torch.zeros(len(row), dtype=torch.int32)
        for start in starts[1:]:
            seq_idx[start:] += 1
        return {"input_ids": row[kept][None], "position_ids": positions[kept][None], "seq_idx": seq_idx[kept][None]}


class _LoadBalanced:
    """A torch load balancer's order, then equal contiguous pieces a rank (as torch's context
    parallelism shards the rearranged sequence); ``restore`` by its restore indices."""

    def __init__(self, kind: str):
        self.kind = kind

    def _balancer(self, length: int, world: int):
        from torch.distributed.tensor.experimental._context_parallel import _load_balancer as lb

        if self.kind == "head_tail":
            return lb._HeadTailLoadBalancer(length, world, "cpu")
        first = (length // 3) // (2 * world) * (2 * world)  # two documents, each a multiple of 2 × world
        return lb._PerDocumentHeadTailLoadBalancer([[first, length - first]], world, "cpu")

    def __call__(self, batch, rank, world):
        order = self._balancer(batch["input_ids"].shape[-1], world)._generate_indices()[0]
        return {name: value[..., order].chunk(world, dim=-1)[rank] for name, value in batch.items()}

    def restore(self, shards):
        import torch

        joined = torch.cat(shards, dim=-1)
        back = self._balancer(joined.shape[-1], len(shards))._generate_indices(restore=True)[0]
        return joined[..., back]


def _register() -> None:
    tf, tv = available("transformers"), version("transformers")
    for name, (vlm, model_class, time) in BUILDERS.items():
        traits = ProducerTraits("mrope_ids", merge=2, time=time, tokens_per_second=2.0, image_token_id=100,
                                video_token_id=101, vision_start_token_id=102,
                                library=f"transformers {tv} {model_class}.get_rope_index")
        posenc.register(producer_record(
            name, traits, _get_rope_index(vlm, model_class) if tf else missing("transformers"), origin=ORIGIN,
            source=f"transformers {tv} {model_class}.get_rope_index, bound to a tiny config",
            description=f"{model_class[:-5]}'s M-RoPE ids, video time by {time}"))
    posenc.register(producer_record(
        "tf_vision_grid", ProducerTraits("vision_grid", merge=2, library=f"transformers {tv} vision_utils"),
        _vision_grid if tf else missing("transformers"), origin=ORIGIN,
        source=f"transformers {tv} vision_utils.get_vision_position_ids (Qwen2.5-VL, Qwen3-VL, GLM-4.1V towers)",
        description="a vision tower's (row, col) ids, merge 2"))
    posenc.register(producer_record(
        "tf_flattening", ProducerTraits("packing", boundaries=("cu_seq_lens", "seq_idx"),
                                        library=f"transformers {tv} DataCollatorWithFlattening"),
        (lambda config: _Flattening()) if tf else missing("transformers"), origin=ORIGIN,
        source=f"transformers {tv} DataCollatorWithFlattening(return_flash_attn_kwargs, return_seq_idx)",
        description="documents flattened in one row, positions restarting"))
    # megatron-core is imported at the first call only (its import takes seconds and warns of
    # optional GPU libraries): installed is enough to register it
    tt, mc = available("torchtune"), version("megatron-core") is not None
    posenc.register(producer_record(
        "packed_torchtune", ProducerTraits("packing", boundaries=("cu_seq_lens",),
                                           library=f"torchtune {version('torchtune')} PackedDataset"),
        (lambda config: _TorchtunePacked()) if tt else missing("torchtune"), origin=ORIGIN,
        source=f"torchtune {version('torchtune')} torchtune.datasets.PackedDataset(max_seq_len, padding_idx=0)",
        description="documents packed greedily into one pack, positions restarting, padded to 8"))
    posenc.register(producer_record(
        "megatron_reset_ids", ProducerTraits("packing", boundaries=("seq_idx",),
                                             library=f"megatron-core {version('megatron-core')} GPT dataset"),
        (lambda config: _MegatronResetIds()) if mc else missing("megatron-core"), origin=ORIGIN,
        source=f"megatron-core {version('megatron-core')} megatron.core.datasets.gpt_dataset."
               "_get_ltor_masks_and_position_ids(reset_position_ids, reset_attention_mask)",
        description="position ids reset after each end-of-document token, the token's columns dropped"))
    tc = version("torch")
    for kind in ("head_tail", "per_document_head_tail"):
        posenc.register(producer_record(
            f"torch_cp_{kind}", ProducerTraits("cp_shard", axes=3, restores=True,
                                               library=f"torch {tc} context-parallel load balancer"),
            (lambda kind: lambda config: _LoadBalanced(kind))(kind), origin=ORIGIN,
            source=f"torch {tc} torch.distributed.tensor.experimental._context_parallel._load_balancer "
                   f"(_{''.join(w.title() for w in kind.split('_'))}LoadBalancer)",
            description=f"context-parallel shards by torch's {kind.replace('_', '-')} load balancer"))


_register()
