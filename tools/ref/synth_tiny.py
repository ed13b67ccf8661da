"""A private writer of tiny V4.1 checkpoints, for the numpy reference's own tests.

Writes config.json (HF form, nested text_config), two safetensors shards plus
model.safetensors.index.json, and a byte-level BPE tokenizer.json, using the
reference module tree's tensor names and the release's storage dtypes. The
weights are random with magnitudes that keep the forward pass well scaled.
The shape exercises every layer role: window-only layers, an engram layer,
ratio-2 KV/index sources and a reader, a ratio-1 KV/index/candidate source, a
reader, a later index source that masks to the candidates, and DSpark stages.

    /usr/bin/python3 tools/ref/synth_tiny.py OUTDIR [--seed N] [--wide]

The bytes written for a given seed are frozen: golden_official.npz holds the
official graph's outputs for seeds 11 (default shape) and 12 (--wide), and
test_golden.py checks the shards' sha256 before comparing.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram as eg  # noqa: E402
import numerics as nx  # noqa: E402

SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
WORDS = ["the", " the", " The", "The", "THE", " cat", " Cat", " café", " cafe", "\n\n", "  ", " \n",
         " Σ", "σ", "ﬁ", " naïve", "é", "\t"]


def tokenizer_json():
    """A byte-level BPE tokenizer: 3 specials, 256 byte tokens, merged words."""
    inv = {b: c for c, b in eg._CHAR_BYTES.items()}
    vocab = {}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[inv[b]] = len(vocab)
    merges = []
    for w in WORDS:
        t = "".join(inv[b] for b in w.encode("utf-8"))
        for k in range(2, len(t) + 1):
            if t[:k] not in vocab:
                merges.append(f"{t[:k - 1]} {t[k - 1]}")
                vocab[t[:k]] = len(vocab)
    return {
        "version": "1.0",
        "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }


# A second shape: a window wider than one 64-position attention chunk, a ratio-2
# source and ratio-1 sources with a candidate filter, index_topk 8.
# The layer layout and widths of `tide synth --shape tiny` (head_dim 128, RoPE 64,
# index heads 96 wide), with a small vocabulary; used with the stand-in tokenizer.
CTINY = dict(hidden_size=128, moe_intermediate_size=64, num_hidden_layers=10, head_dim=128,
             qk_rope_head_dim=64, q_lora_rank=64, o_lora_rank=32, o_groups=2,
             compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0], kv_source_layer_ids=[2, 4, 6],
             index_source_layer_ids=[2, 4, 6, 8], index_n_heads=4, index_head_dim=96, index_topk=6,
             candidate_source_layer_id=6, candidate_topk_blocks=3, candidate_block_size=4,
             compress_rope_theta=40000.0,
             rope_scaling={"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0,
                           "original_max_position_embeddings": 4096},
             engram_layer_ids=[1, 4], engram_vocab_size=1000, engram_head_dim=64, dspark_block_size=4,
             dspark_target_layer_ids=[7, 8, 9], dspark_markov_rank=32, dspark_num_experts_per_tok=2,
             vocab_size=1000)

WIDE = dict(sliding_window=80, num_hidden_layers=4, compress_ratios=[0, 2, 1, 1, 0, 0, 0],
            kv_source_layer_ids=[1, 2], index_source_layer_ids=[1, 2, 3], candidate_source_layer_id=2,
            engram_layer_ids=[1], dspark_target_layer_ids=[1, 2, 3], index_topk=8)


def tiny_text_config(vocab, compressed_vocab, **over):
    c = dict(
        model_type="deepseek_v41_text", vocab_size=vocab, hidden_size=64, moe_intermediate_size=32,
        num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=1, head_dim=64,
        qk_rope_head_dim=16, q_lora_rank=32, o_groups=2, o_lora_rank=32, hidden_act="silu",
        swiglu_limit=10.0, rms_norm_eps=1e-20, max_position_embeddings=4096,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                      "original_max_position_embeddings": 64},
        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, scoring_func="sqrtsoftplus",
        topk_method="noaux_tc", norm_topk_prob=True, routed_scaling_factor=1.5, sliding_window=8,
        compress_ratios=[0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0],
        kv_source_layer_ids=[2, 4, 5], index_source_layer_ids=[2, 4, 5, 7],
        index_n_heads=2, index_head_dim=32, index_topk=4,
        candidate_source_layer_id=5, candidate_topk_blocks=2, candidate_block_size=4,
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
        engram_layer_ids=[1, 4], engram_num_embeddings=[0, 0], engram_max_ngram_size=3,
        engram_vocab_size=50, engram_n_heads=2, engram_head_dim=32, engram_pad_token_id=2,
        engram_compressed_vocab_size=compressed_vocab,
        num_nextn_predict_layers=3, dspark_block_size=5, dspark_noise_token_id=5,
        dspark_target_layer_ids=[5, 6, 7], dspark_markov_rank=16, dspark_n_routed_experts=4,
        dspark_num_experts_per_tok=1, image_token_id=vocab - 1,
    )
    c.update(over)
    return c


class Writer:
    def __init__(self, rng):
        self.rng = rng
        self.t = {}  # name -> (dtype, shape, bytes)

    def bf16(self, name, a):
        a = np.asarray(a, dtype=np.float32)
        self.t[name] = ("BF16", list(a.shape), nx.bf16_to_bits(a).tobytes())

    def f32(self, name, a):
        a = np.asarray(a, dtype=np.float32)
        self.t[name] = ("F32", list(a.shape), a.tobytes())

    def fp8(self, name, a):
        q, s = nx.quant_fp8_weight(a)
        self.t[name + ".weight"] = ("F8_E4M3", list(q.shape), q.tobytes())
        self.t[name + ".scale"] = ("F8_E8M0", list(s.shape), s.tobytes())

    def fp4(self, name, a):
        q, s = nx.quant_fp4_weight(a)
        self.t[name + ".weight"] = ("F4", [q.shape[0], q.shape[1] * 2], q.tobytes())
        self.t[name + ".scale"] = ("F8_E8M0", list(s.shape), s.tobytes())

    def randn(self, *shape, std=1.0):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def lin(self, out, inn, gain=1.0):
        return self.randn(out, inn, std=gain / np.sqrt(inn))

    def save(self, d, n_shards=2, balance=False):
        """balance: fill the shards by size (largest tensor first into the
        smallest shard) instead of dealing the sorted names round-robin."""
        names = sorted(self.t)
        shards = [names[k::n_shards] for k in range(n_shards)]
        if balance:
            shards, sizes = [[] for _ in range(n_shards)], [0] * n_shards
            for n in sorted(names, key=lambda n: (-len(self.t[n][2]), n)):
                k = sizes.index(min(sizes))
                shards[k].append(n)
                sizes[k] += len(self.t[n][2])
            shards = [sorted(g) for g in shards]
        wm = {}
        for k, group in enumerate(shards):
            fn = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
            header, off, blobs = {}, 0, []
            for n in group:
                dt, shape, b = self.t[n]
                header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
                off += len(b)
                blobs.append(b)
                wm[n] = fn
            hb = json.dumps(header).encode()
            hb += b" " * (-len(hb) % 8)
            with open(os.path.join(d, fn), "wb") as f:
                f.write(np.uint64(len(hb)).tobytes())
                f.write(hb)
                for b in blobs:
                    f.write(b)
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(len(v[2]) for v in self.t.values())},
                       "weight_map": wm}, f, indent=1)


def write_block(W, p, c, layer_id, n_layers, engram_rows):
    dim, H, D = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    hc = c["hc_mult"]
    mix = (2 + hc) * hc
    ratio = c["compress_ratios"][layer_id]
    W.bf16(p + ".attn_norm.weight", 1 + W.randn(dim, std=0.1))
    W.bf16(p + ".ffn_norm.weight", 1 + W.randn(dim, std=0.1))
    for s in ("attn", "ffn"):
        W.f32(p + f".hc_{s}_fn", W.randn(mix, hc * dim, std=0.5 / np.sqrt(hc * dim)))
        W.f32(p + f".hc_{s}_base", W.randn(mix, std=0.5))
        W.f32(p + f".hc_{s}_scale", 1 + W.randn(3, std=0.1))
    a = p + ".attn."
    ql, G, olr = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
    W.f32(a + "attn_sink", W.randn(H, std=1.0))
    W.fp8(a + "wq_a", W.lin(ql, dim))
    W.bf16(a + "q_norm.weight", 1 + W.randn(ql, std=0.1))
    W.fp8(a + "wq_b", W.lin(H * D, ql, gain=3.0))
    W.fp8(a + "wkv", W.lin(D, dim))
    W.bf16(a + "kv_norm.weight", 1 + W.randn(D, std=0.1))
    W.bf16(a + "wo_a.weight", W.lin(G * olr, H * D // G))
    W.fp8(a + "wo_b", W.lin(dim, G * olr))
    backbone = layer_id < n_layers
    if backbone and layer_id in c["kv_source_layer_ids"]:
        W.bf16(a + "compressor.wkv.weight", W.lin(D, dim))
        if ratio > 1:
            W.bf16(a + "compressor.wgate.weight", W.lin(D, dim))
        W.bf16(a + "compressor.norm.weight", 1 + W.randn(D, std=0.1))
    if backbone and layer_id in c["index_source_layer_ids"]:
        nh, ihd = c["index_n_heads"], c["index_head_dim"]
        W.fp8(a + "indexer.wq_b", W.lin(nh * ihd, ql, gain=2.0))
        W.bf16(a + "indexer.weights_proj.weight", W.lin(nh, dim, gain=4.0))
        if layer_id in c["kv_source_layer_ids"]:
            W.bf16(a + "indexer.wk.weight", W.lin(ihd, D))
            W.bf16(a + "indexer.k_norm.weight", 1 + W.randn(ihd, std=0.1))
    f = p + ".ffn."
    if backbone:
        ne = c["n_routed_experts"]
    else:
        ne = c["dspark_n_routed_experts"]
    inter = c["moe_intermediate_size"]
    W.bf16(f + "gate.weight", W.lin(ne, dim, gain=2.0))
    W.f32(f + "gate.bias", W.randn(ne, std=0.1))
    for e in range(ne):
        W.fp4(f + f"experts.{e}.w1", W.lin(inter, dim, gain=1.5))
        W.fp4(f + f"experts.{e}.w2", W.lin(dim, inter))
        W.fp4(f + f"experts.{e}.w3", W.lin(inter, dim, gain=1.5))
    W.fp8(f + "shared_experts.w1", W.lin(inter, dim, gain=1.5))
    W.fp8(f + "shared_experts.w2", W.lin(dim, inter))
    W.fp8(f + "shared_experts.w3", W.lin(inter, dim, gain=1.5))
    if backbone and layer_id in c["engram_layer_ids"]:
        e = p + ".engram."
        hd = c["engram_head_dim"]
        cols = (c["engram_max_ngram_size"] - 1) * c["engram_n_heads"]
        tab = W.randn(engram_rows, hd, std=0.5)
        q, s = nx.quant_fp8_weight(tab)  # 32x32 blocks: re-quantise per row of 32 below
        amax = np.maximum(np.abs(tab.reshape(engram_rows, hd // 32, 32)).max(-1), 1e-4)
        sc, code = nx.ue8m0_scale(amax, 1 / 448)
        q = nx.e4m3_encode(nx.e4m3(np.clip(tab.reshape(engram_rows, hd // 32, 32) / sc[..., None], -448, 448)))
        W.t[e + "embed.weight"] = ("F8_E4M3", [engram_rows, hd], q.reshape(engram_rows, hd).tobytes())
        W.t[e + "embed.scale"] = ("F8_E8M0", [engram_rows, hd // 32], code.astype(np.uint8).tobytes())
        W.fp8(e + "wkv", W.lin(dim * (hc + 1), cols * hd))
        W.bf16(e + "q_weight", 1 + W.randn(hc, dim, std=0.2))
        W.bf16(e + "k_weight", 1 + W.randn(hc, dim, std=0.2))


def write_tiny(d, seed=0, tokenizer=None, **over):
    """Write a checkpoint into d. tokenizer: path of a tokenizer.json to use
    instead of the built-in toy one (then give vocab_size in `over` to keep
    the embedding small; ids must stay below it)."""
    os.makedirs(d, exist_ok=True)
    if tokenizer is None:
        tok = tokenizer_json()
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
    else:
        with open(tokenizer, encoding="utf-8") as f:
            tok = json.load(f)
        with open(tokenizer, "rb") as f, open(os.path.join(d, "tokenizer.json"), "wb") as g:
            g.write(f.read())
    tmap, csize = eg.build_token_map(tok)
    c = tiny_text_config(len(tmap), csize, **over)
    vocab = c["vocab_size"]
    # table rows: each layer's prime buckets end at offset[-1] + prime[-1]
    primes = eg.engram_primes(c["engram_layer_ids"], c["engram_max_ngram_size"], c["engram_n_heads"],
                              c["engram_vocab_size"])
    rows = [int(p.sum()) for p in primes]
    c["engram_num_embeddings"] = rows
    cfg = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "bfloat16",
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                   "weight_block_size": [32, 32], "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
           "text_config": c}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    W = Writer(np.random.default_rng(seed))
    dim, V = c["hidden_size"], vocab
    W.bf16("embed.weight", W.randn(V, dim, std=1.0))
    W.bf16("head.weight", W.lin(V, dim, gain=2.0))
    W.bf16("norm.weight", 1 + W.randn(dim, std=0.1))
    n = c["num_hidden_layers"]
    for i in range(n):
        er = rows[c["engram_layer_ids"].index(i)] if i in c["engram_layer_ids"] else 0
        write_block(W, f"layers.{i}", c, i, n, er)
    if c.get("dspark_block_size"):
        ns = c["num_nextn_predict_layers"]
        for s in range(ns):
            write_block(W, f"mtp.{s}", c, n + s, n, 0)
        nt = len(c["dspark_target_layer_ids"])
        W.fp8("mtp.0.main_proj", W.lin(dim, nt * dim))
        W.bf16("mtp.0.main_norm.weight", 1 + W.randn(dim, std=0.1))
        last = f"mtp.{ns - 1}."
        r = c["dspark_markov_rank"]
        W.bf16(last + "norm.weight", 1 + W.randn(dim, std=0.1))
        W.bf16(last + "markov_head.embed.weight", W.randn(V, r, std=1.0))
        W.bf16(last + "markov_head.head.weight", W.lin(V, r))
        W.bf16(last + "confidence_head.proj.weight", W.lin(1, dim + r))
    W.save(d)
    return d


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wide", action="store_true", help="the WIDE shape (window 80, 4 layers)")
    ns = ap.parse_args()
    write_tiny(ns.out, ns.seed, **(WIDE if ns.wide else {}))
    print(ns.out)
