"""The shapes of torchsim's built-in Llama-family and Mixtral models, as plain data (no torch): what
`models.registry` and `models.mixtral` build them from, and what `prediction.speculate` reads before torch is
imported."""

from __future__ import annotations

from typing import Any

# Llama-3 model cards / HF config.json: meta-llama/Meta-Llama-3-8B, -70B, Llama-3.1-8B.
LLAMA3_8B: dict[str, Any] = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                 rope_theta=500000.0, rms_norm_eps=1e-5)
LLAMA3_70B: dict[str, Any] = dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                  num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                                  rope_theta=500000.0, rms_norm_eps=1e-5)
# Llama-2-7B (meta-llama/Llama-2-7b-hf config.json, as recalled: MHA with 32 KV heads, 4096 context, 32000 vocab):
# the model the weight-only quantisation kernels (GPTQ/AWQ on Marlin) are usually benchmarked on
LLAMA2_7B: dict[str, Any] = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                                 max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5)

# name -> LlamaConfig fields (shapes and context), registered by models.registry as LlamaConfig(name=name, **fields)
LLAMA_MODELS: dict[str, dict[str, Any]] = {
    "llama3-8b": {**LLAMA3_8B, "max_position_embeddings": 8192},
    "llama3.1-8b": {**LLAMA3_8B, "max_position_embeddings": 131072},
    "llama3-70b": {**LLAMA3_70B, "max_position_embeddings": 8192},
    # meta-llama/Llama-3.1-70B config.json: Llama-3-70B's shapes with a 131072-token context (its llama3 RoPE
    # scaling changes the rotation frequencies, not the kernels)
    "llama3.1-70b": {**LLAMA3_70B, "max_position_embeddings": 131072},
    "llama2-7b": LLAMA2_7B,
    # Test sizes, CPU-cheap: llama-tiny (head_dim 16: its attention falls back to the roofline) and llama-small
    # (head_dim 64, served by the attention templates).
    "llama-tiny": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=256, max_position_embeddings=512),
    "llama-small": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=1024, max_position_embeddings=2048),
}

# MixtralConfig's defaults where a config leaves them out (Mixtral-8x7B and -8x22B: 8 experts, top-2)
MIXTRAL_EXPERTS, MIXTRAL_TOP_K = 8, 2
# name -> MixtralConfig fields (models.mixtral.MIXTRAL_CONFIGS)
MIXTRAL_MODELS: dict[str, dict[str, Any]] = {
    # mistralai/Mixtral-8x7B-v0.1 config.json (sliding_window null): 46.7 B parameters, 12.9 B active.
    "mixtral-8x7b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768),
    # mistralai/Mixtral-8x22B-v0.1 config.json: 141 B parameters.
    "mixtral-8x22b": dict(hidden_size=6144, intermediate_size=16384, num_hidden_layers=56, num_attention_heads=48,
                          num_key_value_heads=8, vocab_size=32768, max_position_embeddings=65536),
    # CPU-sized: tests, and recording routing with real random-init weights on real token inputs.
    "mixtral-tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096),
    "mixtral-micro": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=256, max_position_embeddings=512, num_local_experts=4),
}
