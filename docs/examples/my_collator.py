"""A user's packing collator, judged on the PACK claims (docs/how-to/plugins.md, "Position producers"):

    pytest specs --plugin docs/examples/my_collator.py --encoders my_collator
"""
import torch

import posenc


def my_collate(examples):
    """Documents in one row: positions restart in each; cu_seq_lens for a varlen attention kernel."""
    tokens = [torch.tensor(e["input_ids"]) for e in examples]
    lengths = torch.tensor([len(t) for t in tokens])
    return {"input_ids": torch.cat(tokens)[None],
            "position_ids": torch.cat([torch.arange(n) for n in lengths.tolist()])[None],
            "cu_seq_lens": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])}


posenc.register(posenc.producer_record(
    "my_collator", posenc.ProducerTraits("packing", boundaries=("cu_seq_lens",)),
    build=lambda config: my_collate,
    source="docs/examples/my_collator.py", description="a user's packing collator"))
