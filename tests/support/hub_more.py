"""What the suite knows of the 16 configs shipped from ../shared/hub-configs-more: the ones the
census refuses (with the reason and why) and the facts each other one must state, read from its
config by hand. Shared by the census, pricing and refresh tests.
"""

# Refused, each with its reason and why. Remote code is refused by design; the others are the
# census's own limits (docs/census.md, Known limits), not transformers'.
# None since dbrx's experts, 2-D weights holding the experts in their rows, are stacked experts
# (tests/census/test_census_dbrx.py).
REFUSED: dict[str, tuple[str, str]] = {}


# Censused and checked in test files of their own (their kinds and counts read from the config by hand).
OWN_TESTS = {
    "ArthurZ/mamba-130m": "tests/census/test_census_mamba.py",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "tests/census/test_census_mamba2.py",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8": "tests/census/test_census_latent_moe.py",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "tests/census/test_census_llama4.py",
    "MiniMaxAI/MiniMax-M1-80k": "tests/census/test_census_remote.py",
    "databricks/dbrx-instruct": "tests/census/test_census_dbrx.py",
}


# Dense and MoE models whose facts are plain in their configs.
TABLE = {
    # 36 layers, 2048, 16/4 heads (head 128), 11008, vocab 128256; tie_word_embeddings unstated: the class ties.
    "HuggingFaceTB/SmolLM3-3B": dict(layers=[("decoder", 36)], hidden_size=2048, num_attention_heads=16, num_key_value_heads=4, head_dim=128, intermediate_size=11008, flags={"tie_word_embeddings"}),
    # 16 layers, 64 experts top 8, intermediate_size 1024 is the expert width (every layer MoE), QK-norm.
    "allenai/OLMoE-1B-7B-0924": dict(layers=[("decoder", 16)], hidden_size=2048, num_attention_heads=16, num_experts=64, num_experts_per_tok=8, moe_intermediate_size=1024, flags={"qk_norm"}),
    "codellama/CodeLlama-34b-Instruct-hf": dict(layers=[("decoder", 48)], hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, intermediate_size=22016, flags=set()),
    # head_dim 128 stated, not 5120/32.
    "mistralai/Mistral-Nemo-Instruct-2407": dict(layers=[("decoder", 40)], hidden_size=5120, num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=14336, flags=set()),
    # sliding_window 262144 stated (longer than any sequence it runs).
    "microsoft/Phi-3.5-mini-instruct": dict(layers=[("decoder", 32)], hidden_size=3072, num_attention_heads=32, head_dim=96, intermediate_size=8192, sliding_window=262144, flags=set()),
    # gpt_neox: biased projections, LayerNorms with bias; 2048 positions.
    "togethercomputer/RedPajama-INCITE-Chat-3B-v1": dict(layers=[("decoder", 32)], hidden_size=2560, num_attention_heads=32, head_dim=80, intermediate_size=10240, flags={"qkv_bias", "o_bias", "mlp_bias", "norm_bias", "layer_norms"}),
    # a sparse text_config: hidden 4096, 32 layers, 11008 are LlamaConfig's defaults; vocab 32064 stated.
    "llava-hf/llava-1.5-7b-hf": dict(layers=[("decoder", 32)], hidden_size=4096, num_attention_heads=32, intermediate_size=11008, vocab_size=32064, flags=set()),
}
