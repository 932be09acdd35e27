"""Defects of attention modules with RoPE inside: softmax and linear attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc import LinearAttentionRoPE, RoPEAttention, RotaryEmbedding

from ._scaffold import mutant, placed


class RotatesValues(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        return super().attend(q, k, self.rotary(v, positions, offset=offset), positions, offset=offset)


@mutant(
    "attention_rope",
    fails={"ROPE-6", "ATT-1", "ATT-4"},
    # ATT-2 left the set: it reads the weights at position 0, where rotating v changes nothing; they are right.
    why="v rotated (ROPE-6): the output is not plain attention on unrotated v (ATT-1), "
    "and rotated values carry absolute positions (ATT-4)",
)
def attention_rotates_values(c):
    """V rotated along with q and k"""
    # 004 §3.3 rotates q and k only; flash-attention checks that V is left bit-identical.
    return placed(RotatesValues(c.d_model, c.n_heads, base=c.base), c)


class KeysRotatedBackwards(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        def conjugate(t):  # interleaved pairs as complex numbers: negate the odd coordinates
            return t * torch.tensor([1.0, -1.0], dtype=t.dtype, device=t.device).repeat(t.shape[-1] // 2)

        q = self.rotary(q, positions, offset=offset)
        k = conjugate(self.rotary(conjugate(k), positions, offset=offset))  # R_{-p} k = conj(R_p conj(k))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=self.causal)
        return out.transpose(1, 2)


@mutant(
    "attention_rope",
    fails={"ATT-1", "ATT-4"},
    why="k turns by −p inside attention: the output is not plain attention on R q, R k (ATT-1), and the logits "
    "follow m + n, not m − n (ATT-4); the weights are a softmax of the module's own scores (ATT-2 holds)",
)
def attention_keys_rotated_backwards(c):
    """keys rotated by −p inside the attention: a correct softmax of wrong scores"""
    # Blamed on ATT-2 by a spec that inferred the weights against the reference rotation.
    return placed(KeysRotatedBackwards(c.d_model, c.n_heads, base=c.base), c)


class SoftmaxOverQueries(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q, k = (self.rotary(t, positions, offset=offset).transpose(1, 2) for t in (q, k))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        return (scores.softmax(dim=-2) @ v.transpose(1, 2)).transpose(1, 2)


@mutant(
    "attention_rope",
    fails={"ATT-2", "ATT-1"},
    why="the weights are wrong (ATT-2), so the output is not plain attention (ATT-1)",
)
def attention_softmax_over_queries(c):
    """softmax taken over the query axis: columns sum to 1, rows do not"""
    # labmlai annotated_deep_learning_paper_implementations #146, PyTorch-NLP #2.
    return placed(SoftmaxOverQueries(c.d_model, c.n_heads, base=c.base), c)


class ScaledByDModel(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        rescale = math.sqrt(self.head_dim / self.d_model)  # SDPA's 1/√d_k becomes 1/√d_model
        return super().attend(q * rescale, k, v, positions, offset=offset)


@mutant(
    "attention_rope",
    fails={"ATT-2", "ATT-1"},
    why="the scale is wrong (ATT-2), so the output is not plain attention (ATT-1)",
)
def attention_scaled_by_d_model(c):
    """scores scaled by 1/√d_model instead of 1/√d_k"""
    # brightmart/bert_language_understanding #9; 004 §4 scales by 1/√d_k.
    return placed(ScaledByDModel(c.d_model, c.n_heads, base=c.base), c)


class CausalMaskOffByOne(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q, k = (self.rotary(t, positions, offset=offset) for t in (q, k))
        seq = q.shape[1]
        allowed = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril(diagonal=1)  # should be 0
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=allowed)
        return out.transpose(1, 2)


@mutant(
    "attention_rope_causal",
    fails={"ATT-3", "ATT-1"},
    why="a later token is attended (ATT-3): the output is not that of masked attention (ATT-1); its weights are "
    "scaled and sum to 1 over the keys it sees (ATT-2 holds: the mask is ATT-3's)",
)
def attention_causal_mask_off_by_one(c):
    """causal mask built with the wrong diagonal: each token also sees the next one"""
    # The tril/triu diagonal argument confused (0 vs 1); training loss looks excellent.
    return placed(CausalMaskOffByOne(c.d_model, c.n_heads, base=c.base, causal=True), c)


class CausalFlagNotPassed(RoPEAttention):
    def attend(self, q, k, v, positions=None, *, offset=0):
        q, k = (self.rotary(t, positions, offset=offset) for t in (q, k))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)  # self.causal is set, but is_causal never reaches the kernel


@mutant("attention_rope_causal", fails={"ATT-3", "ATT-1"}, why="as the mask off by one")
def attention_declared_causal_without_mask(c):
    """a causal attention whose mask never reaches the kernel"""
    # kzl/decision-transformer #30: a padding mask taken for the causal mask; 004 §5.2 masks before softmax.
    return placed(CausalFlagNotPassed(c.d_model, c.n_heads, base=c.base, causal=True), c)


class WithoutFeatureMap(LinearAttentionRoPE):
    """The feature map is defined but never applied: q, k enter the O(n) sums raw."""

    def __init__(self, d_model, n_heads, **rotary_options):
        super().__init__(d_model, n_heads, **rotary_options)
        self.rotary = RotaryEmbedding(self.head_dim, **rotary_options)

    def attend(self, q, k, v, positions=None, *, offset=0):
        rot_q, rot_k = self.rotary(q, positions, offset=offset), self.rotary(k, positions, offset=offset)
        context = torch.einsum("bnhf,bnhe->bhfe", rot_k, v)
        numerator = torch.einsum("bnhf,bhfe->bnhe", rot_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", q, k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)


@mutant("linear_attention_rope", fails={"LIN-2"})
def linear_attention_without_feature_map(c):
    """linear attention with RoPE that drops the positive feature map φ"""
    # 000 §5.2's class never defines part of its pipeline; without φ the normaliser can vanish or change sign.
    return placed(WithoutFeatureMap(c.d_model, c.n_heads, base=c.base), c)


class KeysNotRotated(LinearAttentionRoPE):
    def attend(self, q, k, v, positions=None, *, offset=0):
        phi_q, phi_k = F.elu(self.feature_map(q)) + 1, F.elu(self.feature_map(k)) + 1
        rot_q = self.rotary(phi_q, positions, offset=offset)
        context = torch.einsum("bnhf,bnhe->bhfe", phi_k, v)  # k never rotated
        numerator = torch.einsum("bnhf,bhfe->bnhe", rot_q, context)
        normaliser = torch.einsum("bnhf,bhf->bnh", phi_q, phi_k.sum(dim=1))
        return numerator / normaliser.unsqueeze(-1)


@mutant("linear_attention_rope", fails={"LIN-2"})
def linear_attention_k_unrotated(c):
    """linear attention that rotates φ(q) but not φ(k)"""
    # references: bug class 8 (k left unrotated: Liger-Kernel #342, ColossalAI #6444).
    return placed(KeysNotRotated(c.d_model, c.n_heads, base=c.base), c)


class AttendsAcrossHeads(RoPEAttention):
    """q @ kᵀ on (batch, seq, heads, d) tensors, as 000 §3.3 writes it: each token's heads attend to
    each other, so q and k of one token turn by one angle and the rotation cancels; the output is
    then read back through a reshape that mixes tokens."""

    def attend(self, q, k, v, positions=None, *, offset=0):
        q = self.rotary(q, positions, offset=offset)
        k = self.rotary(k, positions, offset=offset)
        weights = (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(dim=-1)
        out = weights @ v  # (batch, seq, heads, d)
        return out.transpose(1, 2).reshape(q.shape)  # heads and tokens interleaved


@mutant(
    "attention_rope",
    fails={"ATT-1", "ATT-2", "ATT-4"},
    why="its weights run over heads, not the sequence (ATT-1, ATT-2), and RoPE cancels, so its shift "
    "invariance is vacuous (ATT-4)",
)
def attention_across_heads_rope_cancels(c):
    """attention across the heads of each token: RoPE cancels, a reshape mixes tokens"""
    # Passed ATT-4 when position awareness was judged by reordering tokens, which the reshape changes anyway;
    # failed ROPE-6 when each head's value vector differed, though v is never rotated.
    return placed(AttendsAcrossHeads(c.d_model, c.n_heads, base=c.base), c)
