"""The named shapes of `tide synth --shape NAME` as config dicts, so the bench
can build a model without a checkpoint on disk.

Transcribed from src/model/config_preset.c (the truth); selftest.py checks
that tiny and small here parse to the same fields as the config.json that
`tide synth` writes, so a change there shows up as a failing self-test.
flash and flash-ep8 share every line except their own.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import ckpt  # noqa: E402
import engram as eg  # noqa: E402

NAMES = ("tiny", "small", "flash", "flash-ep8")


def _common():
    return dict(vocab_size=129280, num_key_value_heads=1, qk_rope_head_dim=64, rms_norm_eps=1e-20,
                n_shared_experts=1, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
                routed_scaling_factor=1.5, norm_topk_prob=True, swiglu_limit=10.0, gate_temp=1.0,
                rope_theta=10000.0, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, engram_pad_token_id=2,
                engram_compressed_vocab_size=99092, dspark_noise_token_id=128799)


def _toy(c):
    c.update(num_hidden_layers=10, num_nextn_predict_layers=3,
             compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0], kv_source_layer_ids=[2, 4, 6],
             index_source_layer_ids=[2, 4, 6, 8], engram_layer_ids=[1, 4], dspark_target_layer_ids=[7, 8, 9],
             candidate_source_layer_id=6, compress_rope_theta=40000.0, max_position_embeddings=32768,
             dspark_block_size=4,
             rope_scaling=dict(rope_type="yarn", factor=8.0, beta_fast=32.0, beta_slow=1.0,
                               original_max_position_embeddings=4096))


def _tiny(c):
    _toy(c)
    c.update(hidden_size=128, num_attention_heads=4, head_dim=128, q_lora_rank=64, o_groups=2, o_lora_rank=32,
             sliding_window=8, candidate_topk_blocks=3, candidate_block_size=4, index_n_heads=4,
             index_head_dim=96, index_topk=6, n_routed_experts=8, num_experts_per_tok=2,
             moe_intermediate_size=64, engram_max_ngram_size=3, engram_n_heads=2, engram_head_dim=64,
             engram_vocab_size=1000, dspark_markov_rank=32, dspark_n_routed_experts=4,
             dspark_num_experts_per_tok=2)


def _small(c):
    _toy(c)
    c.update(hidden_size=256, num_attention_heads=8, head_dim=192, q_lora_rank=128, o_groups=4, o_lora_rank=64,
             sliding_window=16, candidate_topk_blocks=4, candidate_block_size=4, index_n_heads=8,
             index_head_dim=128, index_topk=12, n_routed_experts=16, num_experts_per_tok=4,
             moe_intermediate_size=128, engram_max_ngram_size=4, engram_n_heads=4, engram_head_dim=128,
             engram_vocab_size=3000, dspark_markov_rank=64, dspark_n_routed_experts=8,
             dspark_num_experts_per_tok=3)


def _flash(c):
    c.update(num_hidden_layers=40, num_nextn_predict_layers=3,
             compress_ratios=[0 if i < 2 else 2 if i < 20 else 1 if i < 40 else 0 for i in range(43)],
             kv_source_layer_ids=[2, 8, 14, 20], index_source_layer_ids=[2, 8, 14, 20, 24, 28, 32, 36],
             engram_layer_ids=[1, 14], dspark_target_layer_ids=[37, 38, 39], hidden_size=5120,
             num_attention_heads=64, head_dim=512, q_lora_rank=1280, o_groups=8, o_lora_rank=1024,
             max_position_embeddings=1048576, sliding_window=128, candidate_source_layer_id=20,
             candidate_topk_blocks=2048, candidate_block_size=8, index_n_heads=32, index_head_dim=128,
             index_topk=512, compress_rope_theta=160000.0,
             rope_scaling=dict(rope_type="yarn", factor=16.0, beta_fast=32.0, beta_slow=1.0,
                               original_max_position_embeddings=65536),
             n_routed_experts=384, num_experts_per_tok=6, moe_intermediate_size=2304, engram_max_ngram_size=4,
             engram_n_heads=8, engram_head_dim=256, engram_vocab_size=16000000, dspark_block_size=5,
             dspark_markov_rank=256, dspark_n_routed_experts=128, dspark_num_experts_per_tok=3)


def _flash_ep8(c):
    _flash(c)
    c.update(n_routed_experts=384 // 8, dspark_n_routed_experts=128 // 8, engram_vocab_size=262144)


def text_config(name):
    """The HF-form text_config dict of a named shape."""
    build = {"tiny": _tiny, "small": _small, "flash": _flash, "flash-ep8": _flash_ep8}.get(name)
    if build is None:
        raise ValueError(f"unknown shape {name!r} (known: {', '.join(NAMES)})")
    c = _common()
    build(c)
    primes = eg.engram_primes(c["engram_layer_ids"], c["engram_max_ngram_size"], c["engram_n_heads"],
                              c["engram_vocab_size"])
    c["engram_num_embeddings"] = [int(np.sum(p)) for p in primes]
    return c


def args(name):
    """tools/ref/ckpt.Args of a named shape."""
    return ckpt.parse_config({"text_config": text_config(name)})
