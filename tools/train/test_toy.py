"""CPU smoke test of the tide-mini trainer at toy size (no GPU, no HF tokenizers).

    /usr/bin/python3 tools/train/test_toy.py      (needs python3-torch and numpy)

A toy config with every layer role, a byte-level toy tokenizer carrying the
V4.1 added tokens; a few quantisation-aware training steps of the backbone,
the indexer and the DSpark stages on random tokens (fresh seed, printed;
TIDE_SEED pins it); export; then the exported checkpoint is run by the numpy
oracle (tools/ref/model.py) and its logits, and those of one DSpark step,
are compared with the trainer's fake-quantised forward on the same tokens in
exact mode (bf16 rounding where the oracle rounds, the reference kernel's
un-normalised probabilities): every layer's input within 1 % (in practice
~1e-4: accumulation order only).
"""
import json
import os
import sys
import tempfile

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "ref"))
import data as dt  # noqa: E402
import engram as eg  # noqa: E402
import export  # noqa: E402
import synth_tiny  # noqa: E402
import tide_mini as mm  # noqa: E402
import train as tr  # noqa: E402

import model as refmodel  # noqa: E402  (tools/ref/model.py: the oracle)

TOY = dict(hidden_size=64, num_attention_heads=2, head_dim=64, qk_rope_head_dim=32, q_lora_rank=32,
           o_groups=2, o_lora_rank=32, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
           sliding_window=8, index_n_heads=2, index_head_dim=32, index_topk=3, candidate_topk_blocks=2,
           candidate_block_size=4, engram_vocab_size=50, engram_head_dim=32, engram_n_heads=2,
           dspark_markov_rank=16, dspark_n_routed_experts=2, dspark_num_experts_per_tok=1,
           rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
                         "original_max_position_embeddings": 16})


def toy_tokenizer(path):
    tok = synth_tiny.tokenizer_json()
    n = len(tok["model"]["vocab"])
    for c, special in dt.added_tokens():
        tok["added_tokens"].append({"id": n, "content": c, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": special})
        n += 1
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    return tok


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def main():
    seed = int(os.environ.get("TIDE_SEED", np.random.SeedSequence().entropy % (1 << 31)))
    print(f"test_toy: seed {seed} (TIDE_SEED={seed} repeats it)", flush=True)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tmp = tempfile.mkdtemp(prefix="tide-train-toy-")
    tok_path = os.path.join(tmp, "tokenizer.json")
    tok = toy_tokenizer(tok_path)
    sp = dt.special_ids(tok)
    tmap, csize = eg.build_token_map(tok)
    text = mm.mini_text_config(len(tmap), csize, noise_id=sp["<｜System｜>"], image_id=sp["<｜deepseek_image｜>"],
                               **TOY)
    T, B = 40, 2
    m = mm.Model(text, T + 8)
    hasher = dt.Hasher(m.a, tok_path)
    rows = rng.integers(3, 259, size=(6, T + 1)).astype(np.int32)
    rows[:, 0] = sp[dt.BOS]
    hashes = hasher.rows(rows[:, :-1])
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    gen = torch.Generator()
    gen.manual_seed(seed)
    first = last = None
    for step in range(6):
        m.set_qat(step >= 3)
        m.index_mode = "dense" if step == 0 else "topk"
        r = torch.from_numpy(rows[:B].astype(np.int64))
        h = torch.from_numpy(hashes[:B].astype(np.int64))
        out = m(r[:, :-1], h, targets=r[:, 1:])
        nll = out["nll"].mean()
        x, anchors, toks = tr.dspark_batch(m, r, h, 4, gen)
        ce, bce, _ = tr.dspark_loss(m, x, h, anchors, toks)
        loss = nll + out["index_loss"] + ce + 0.1 * bce
        assert torch.isfinite(loss), f"step {step}: loss {loss}"
        opt.zero_grad()
        loss.backward()
        opt.step()
        for L in list(m.layers) + list(m.mtp):
            L.ffn.update_bias(1e-3)
        first = first if first is not None else float(nll)
        last = float(nll)
    print(f"train: nll {first:.3f} -> {last:.3f}")
    assert last < first, "six steps on one batch did not lower the loss"
    # the bias moved for balance
    assert any(float(L.ffn.gate.bias.abs().sum()) > 0 for L in m.layers)

    mdir = os.path.join(tmp, "model")
    files = export.export(m, tok_path, mdir)
    names = sorted(os.path.relpath(f, mdir) for f in files)
    print("export:", names)
    assert "inference/config.json" in names and "model.safetensors.index.json" in names

    # the exported checkpoint through the oracle vs the trainer's fake-quantised forward
    m.set_qat(True)
    m.set_exact(True)
    m.eval()
    ref = refmodel.Model(mdir)
    ids = rows[0, :-1].astype(np.int64)
    st = ref.new_state()
    dump = {}
    o = ref.forward(st, ids, dump=dump)
    m.trace = {}
    with torch.no_grad():
        r = torch.from_numpy(ids[None])
        out = m(r, torch.from_numpy(hashes[:1].astype(np.int64)), need_hidden=True)
    for k, v in m.trace.items():
        e = rel(v[0], dump[k])
        print(f"  {k}: relative error {e:.2e}")
        if e >= 0.01 and os.environ.get("TOY_DEBUG"):
            d = np.abs(v[0] - dump[k]).reshape(v.shape[1], -1).max(-1)
            print("per position max abs diff:", np.round(d, 4))
        assert e < 0.01, f"{k}: the trainer's layer input differs from the oracle's by {e:.3f}"
    m.trace = None
    lt = out["logits"][0].numpy()
    err = rel(lt, o["logits"])
    agree = float((lt.argmax(-1) == o["logits"].argmax(-1)).mean())
    print(f"backbone logits vs oracle: relative error {err:.2e}, top-1 agreement {agree:.3f}")
    assert err < 0.01 and agree >= 0.95, (err, agree)
    hid = out["main_hidden"][0].numpy()
    herr = rel(hid, o["main_hidden"])
    print(f"DSpark target hidden vs oracle: relative error {herr:.2e}")
    assert herr < 0.01, herr

    # one DSpark step at anchor spos from the oracle's own main_hidden
    spos = T - m.a.dspark_block_size - 3
    st2 = ref.new_state()
    o2 = ref.forward(st2, ids[:spos + 1])
    ref.dspark_seed(st2, o2["main_hidden"][:spos], 0)
    tok1 = int(ids[spos + 1])
    d = ref.dspark_step(st2, spos, o2["main_hidden"][spos:spos + 1], tok1)
    with torch.no_grad():
        mh = torch.from_numpy(o["main_hidden"][None].astype(np.float32))
        prev = torch.from_numpy(d["draft_ids"][None, None, :-1].astype(np.int64))
        lg, conf = m.dspark_forward(mh, r, torch.tensor([[spos]]), prev)
    derr = rel(lg[0, 0].numpy(), d["logits"])
    cerr = rel(conf[0, 0].numpy(), d["confidence"])
    print(f"DSpark logits vs oracle: relative error {derr:.2e}; confidence {cerr:.2e}")
    assert derr < 0.01 and cerr < 0.01, (derr, cerr)
    print("test_toy: OK")


if __name__ == "__main__":
    main()
