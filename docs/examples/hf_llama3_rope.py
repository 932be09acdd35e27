# hf_llama3_rope.py
# transformers' Llama 3.1 RoPE at its published settings, as a bare module and apply function.
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

config = LlamaConfig(hidden_size=2048, num_attention_heads=16, max_position_embeddings=131072,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192})
rope = LlamaRotaryEmbedding(config)


def apply(q, k, cos, sin):
    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
