"""What every model adapter is: a causal LM in the harness's one call convention
(:mod:`.models` describes it and picks the adapter), and the error for what it cannot express."""

from __future__ import annotations

import torch
from torch import nn

from ..catalogue.records import ModelTraits


class NotInConvention(Exception):
    """The model's call convention cannot express what a relation needs (a mask, explicit positions):
    the relation is not applicable to it, which the spec reports as such."""


class ModelSubject(nn.Module):
    """A causal LM in the harness's convention; ``.to()`` reaches the model as it is."""

    #: True once the model answered a bare tensor: its logits, with no cache (an adapter never
    #: unpacks one as ``(logits, cache)``, which would read its rows as the two).
    logits_only = False
    #: True where a step of the wrong shape is a cache convention the harness cannot call, not a
    #: broken contract (:class:`~.models.HFCausalLM`).
    continues_by_its_own_convention = False

    def __init__(self, model: nn.Module, traits: ModelTraits):
        super().__init__()
        self.model, self.traits = model.eval(), traits

    def missing_cache(self) -> str:
        """What the model answered where its cache came back None, for a one-line message."""
        return "a tensor, not (logits, cache)" if self.logits_only else "no cache (logits, None)"

    def forward(self, input_ids, position_ids=None, attention_mask=None, cache=None,
                document_ids=None):  # pragma: no cover
        raise NotImplementedError

    def generate(self, input_ids, attention_mask, prompt: int) -> torch.Tensor:
        """Decode ``input_ids[:, prompt:]`` one token a call after the prompt, positions the model's
        own: (batch, length − prompt, vocabulary) logits, those of position prompt − 1 first."""
        logits, cache = self(input_ids[:, :prompt], attention_mask=attention_mask[:, :prompt])
        steps = [logits[:, -1]]
        for j in range(prompt, input_ids.shape[1] - 1):
            logits, cache = self(input_ids[:, j : j + 1], attention_mask=attention_mask[:, : j + 1], cache=cache)
            steps.append(logits[:, -1])
        return torch.stack(steps, dim=1)
