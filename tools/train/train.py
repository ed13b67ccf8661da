"""Train tide-mini: tokenizer, backbone (+ indexer), DSpark drafter; export; evaluate.

    python3 tools/train/train.py --corpus DIR --out DIR [--steps N] [--dspark-steps N] ...

Phases (every random choice from --seed; see tools/train/README.md):
  1. tokenizer: byte-level BPE of --vocab ids (HF tokenizers) with V4.1's
     added tokens (data.py);
  2. data: corpus split (last 1 % of each source = validation), chat
     examples, fixed rows of --seq tokens after BOS, engram hashes;
  3. backbone: AdamW, warm-up + cosine; the first --dense-frac of the steps
     attend to every visible compressed entry (the indexer learns meanwhile,
     by KL to the attention mass on the compressed entries), then top-k;
     quantisation-aware (fake FP8/FP4) for the last --qat-frac; the MoE
     selection bias follows the load after every step;
  4. DSpark: the stages, main_proj and the heads on the frozen (fake-quantised)
     backbone: cross-entropy of the drafts with the Markov bias of the true
     previous token, and the confidence head on "draft j is right";
  5. export (export.py) and evaluation: validation and held-out perplexity of
     the bf16 model, of the fake-quantised model, and of the exported
     checkpoint run by tools/torch_ref/baseline.py with the in-graph
     simulations (sim=True: the oracle's function); indexer top-k against a
     random choice of the same size; DSpark acceptance on the model's own
     greedy continuations of held-out text; greedy samples.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "ref"))
sys.path.insert(0, os.path.join(_HERE, "..", "torch_ref"))
import data as dt  # noqa: E402
import tide_mini as mm  # noqa: E402

T0 = time.time()
LOG = None


def log(*a):
    s = f"[{time.time() - T0:7.1f}s] " + " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG:
        LOG.write(s + "\n")
        LOG.flush()


def lr_at(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


def over_budget(t0, budget, flag, step, total, summary):
    """The time guard of a phase: True (and a note in log and summary) once past budget."""
    if budget and time.time() - t0 > budget:
        log(f"STOPPED by {flag} at step {step} of {total} (not deterministic)")
        summary[flag.lstrip("-").replace("-", "_") + "_stopped_at_step"] = step
        return True
    return False


class Batches:
    """Shuffled rows [N, T+1] with their hashes, one epoch after another (seeded)."""

    def __init__(self, rows, hashes, B, seed, dev):
        self.rows, self.hashes, self.B, self.dev = rows, hashes, B, dev
        self.rng = np.random.default_rng(seed)
        self.order, self.at = self.rng.permutation(len(rows)), 0

    def next(self):
        if self.at + self.B > len(self.order):
            self.order, self.at = self.rng.permutation(len(self.rows)), 0
        sel = np.sort(self.order[self.at:self.at + self.B])
        self.at += self.B
        r = torch.from_numpy(self.rows[sel].astype(np.int64)).to(self.dev)
        h = torch.from_numpy(self.hashes[sel].astype(np.int64)).to(self.dev) if self.hashes is not None else None
        return r, h


def eval_nll(model, rows, hashes, B, dev, mode="topk", qat=False):
    """Mean NLL over every target >= 0 of rows [N, T+1]; -> (nll, tokens)."""
    model.eval()
    model.index_mode = mode
    old = model.qat
    model.set_qat(qat)
    tot, cnt = 0.0, 0
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        for s in range(0, len(rows), B):
            r = torch.from_numpy(rows[s:s + B].astype(np.int64)).to(dev)
            h = torch.from_numpy(hashes[s:s + B].astype(np.int64)).to(dev) if hashes is not None else None
            x, y = r[:, :-1], r[:, 1:]
            out = model(x.clamp_min(0), h, targets=y)
            tot += float(out["nll"].sum())
            cnt += int((y >= 0).sum())
    model.set_qat(old)
    model.index_mode = "topk"
    model.train()
    return tot / max(cnt, 1), cnt


def window_rows(ids, T, bos):
    """Evaluation rows [N, T+1] of one token stream: BOS then T tokens each (the
    last row padded with -1 targets). The held-out protocol of docs/tide-mini.md."""
    n = -(-len(ids) // T)
    out = np.full((n, T + 1), -1, np.int32)
    out[:, 0] = bos
    for k in range(n):
        w = ids[k * T:(k + 1) * T]
        out[k, 1:1 + len(w)] = w
    return out


# ---------------------------------------------------------------- DSpark

def dspark_batch(model, r, h, n_anchor, gen):
    """Anchors and teacher-forced Markov inputs for rows r [B, T+1] -> tensors."""
    a = model.a
    blk = a.dspark_block_size
    x = r[:, :-1].clamp_min(0)
    B, T = x.shape
    lo, hi = 1, T - blk - 2
    anchors = torch.stack([torch.randperm(hi - lo, generator=gen)[:n_anchor] + lo for _ in range(B)]).to(x.device)
    anchors = anchors.sort(-1).values
    offs = torch.arange(blk + 1, device=x.device)
    toks = torch.gather(x, 1, (anchors[..., None] + 1 + offs).reshape(B, -1)).reshape(B, n_anchor, blk + 1)
    return x, anchors, toks  # toks[..., 0] the sampled token, toks[..., 1:] the draft targets


def dspark_loss(model, x, h, anchors, toks):
    with torch.no_grad():
        out = model(x, h, need_hidden=True)
        mh = out["main_hidden"]
    logits, conf = model.dspark_forward(mh, x, anchors, toks[..., :-1])
    tgt = toks[..., 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1))
    right = (logits.argmax(-1) == tgt).float()
    ok = torch.cumprod(right, -1)  # every draft up to j right: the accepted prefix
    bce = F.binary_cross_entropy_with_logits(conf.float(), ok)
    return ce, bce, right.mean().item()


def greedy_extend(model, x, h_fn, n_new, dev):
    """Greedy continuation of rows x [B, t] by n_new tokens with the training forward."""
    model.eval()
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        for _ in range(n_new):
            h = h_fn(x)
            lg = model(x, h)["logits"][:, -1]
            x = torch.cat([x, lg.argmax(-1, keepdim=True)], 1)
    model.train()
    return x


def acceptance(model, seqs, h, start, dev):
    """DSpark acceptance on sequences whose tokens from `start` on are the main
    model's greedy choice: per anchor sp >= start-1, the drafts (greedy, each
    with the Markov bias of the previous draft) accepted before the first
    mismatch. -> (mean accepted drafts, mean tokens per step = 1 + accepted)."""
    blk = model.a.dspark_block_size
    B, T = seqs.shape
    anchors = torch.arange(start - 1, T - blk - 1, device=dev)[None].expand(B, -1).contiguous()
    N = anchors.shape[1]
    model.eval()
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        mh = model(seqs, h, need_hidden=True)["main_hidden"]
        prev = torch.gather(seqs, 1, anchors + 1)
        drafts = []
        for j in range(blk):  # the Markov bias of draft j depends on draft j-1
            dp = torch.stack(drafts_prev(prev, drafts, blk), -1)
            logits, _ = model.dspark_forward(mh, seqs, anchors, dp)
            drafts.append(logits[:, :, j].argmax(-1))
        dr = torch.stack(drafts, -1)  # [B, N, blk]
        offs = torch.arange(blk, device=dev)
        truth = torch.gather(seqs, 1, (anchors[..., None] + 2 + offs).reshape(B, -1)).reshape(B, N, blk)
        acc = torch.cumprod((dr == truth).float(), -1).sum(-1)
    model.train()
    return float(acc.mean()), float(acc.mean()) + 1.0


def drafts_prev(prev, drafts, blk):
    cols = [prev] + list(drafts)
    while len(cols) < blk:
        cols.append(prev)
    return cols[:blk]


# ---------------------------------------------------------------- main

def main():
    global LOG
    ap = argparse.ArgumentParser(description="train tide-mini")
    ap.add_argument("--corpus", required=True, help="folder of corpus *.txt (build_corpus.sh)")
    ap.add_argument("--chat", default=os.path.join(_HERE, "data"),
                    help="folder with chat_train.txt / chat_valid.txt (tools/train/data/build.sh)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="use this tokenizer.json instead of training one")
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dense-frac", type=float, default=0.05)
    ap.add_argument("--qat-frac", type=float, default=0.15)
    ap.add_argument("--index-weight", type=float, default=1.0)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--dspark-steps", type=int, default=400)
    ap.add_argument("--dspark-anchors", type=int, default=32)
    ap.add_argument("--dspark-lr", type=float, default=2e-3)
    ap.add_argument("--eval-rows", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config", default="{}", help="JSON overrides of the text_config")
    ap.add_argument("--max-train-tokens", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=0,
                    help="safety stop of the backbone phase after this many seconds (0: none; "
                    "a run stopped by it is not deterministic and says so)")
    ap.add_argument("--dspark-time-budget", type=float, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ns = ap.parse_args()
    os.makedirs(ns.out, exist_ok=True)
    LOG = open(os.path.join(ns.out, "train.log"), "w")
    dev = torch.device(ns.device)
    torch.manual_seed(ns.seed)
    np.random.seed(ns.seed)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.use_deterministic_algorithms(True, warn_only=True)
    log("args", json.dumps(vars(ns)))
    summary = {"args": vars(ns), "torch": torch.__version__,
               "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"}

    # ---- data and tokenizer
    corpus = dt.read_corpus(ns.corpus)
    train_txt, val_txt = dt.split(corpus)
    chat_tr, chat_va = dt.read_chat(ns.chat)
    log(f"corpus: {len(corpus)} sources, {sum(len(t) for _, t in train_txt)} train chars; "
        f"chat: {len(chat_tr)} train, {len(chat_va)} val examples")
    mdir = os.path.join(ns.out, "model")
    os.makedirs(mdir, exist_ok=True)
    tok_path = os.path.join(mdir, "tokenizer.json")
    if ns.tokenizer:
        with open(ns.tokenizer, "rb") as f, open(tok_path, "wb") as g:
            g.write(f.read())
    else:
        chat_plain = "\n".join(chat_tr[:20000])
        for c, _ in dt.added_tokens() + [(dt.BOS, 1), (dt.EOS, 1)]:
            chat_plain = chat_plain.replace(c, "\n")
        dt.train_tokenizer([t for _, t in train_txt] + [chat_plain], ns.vocab, tok_path)
    with open(tok_path, encoding="utf-8") as f:
        tokj = json.load(f)
    sp = dt.special_ids(tokj)
    bos, eos, pad = sp[dt.BOS], sp[dt.EOS], sp[dt.PAD]
    import engram as eg
    tmap, csize = eg.build_token_map(tokj)
    vocab = len(tmap)
    log(f"tokenizer: {vocab} ids, engram compressed vocab {csize}; bos {bos} eos {eos} pad {pad}")
    text = mm.mini_text_config(vocab, csize, noise_id=sp["<｜System｜>"], image_id=sp["<｜deepseek_image｜>"],
                               bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, engram_pad_token_id=pad,
                               **json.loads(ns.config))
    T = ns.seq
    tr_ids = dt.encode_texts(tok_path, [t for _, t in train_txt])
    va_ids = dt.encode_texts(tok_path, [t for _, t in val_txt])
    held = dt.heldout_text(val_txt)
    with open(os.path.join(ns.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held)
    held_ids = dt.encode_texts(tok_path, [held])[0]
    rows = dt.sequences(tr_ids, T, bos, eos)
    if ns.max_train_tokens:
        rows = rows[:max(1, ns.max_train_tokens // T)]
    n_text_rows = len(rows)
    if chat_tr:
        cr = dt.chat_rows(encode_docs(tok_path, chat_tr), T)
        rows = np.concatenate([rows, cr], 0)
    val_rows = dt.sequences(va_ids, T, bos, eos)
    vr = np.random.default_rng(ns.seed + 7).permutation(len(val_rows))[:ns.eval_rows]
    val_rows = val_rows[np.sort(vr)]
    chat_val_rows = dt.chat_rows(encode_docs(tok_path, chat_va), T)[:ns.eval_rows] if chat_va else None
    held_rows = window_rows(held_ids, T, bos)
    summary["data"] = {"train_tokens": int(n_text_rows * T), "train_rows": int(len(rows)),
                       "chat_rows": int(len(rows) - n_text_rows), "val_rows": int(len(val_rows)),
                       "heldout_tokens": int(len(held_ids)), "heldout_chars": len(held)}
    log("data", json.dumps(summary["data"]))

    model = mm.Model(text, text["max_position_embeddings"], dev)  # rope tables for every position
    hasher = dt.Hasher(model.a, tok_path)
    t1 = time.time()
    hashes = hasher.rows(rows[:, :-1])
    val_h = hasher.rows(val_rows[:, :-1])
    held_h = hasher.rows(held_rows[:, :-1])
    chat_val_h = hasher.rows(chat_val_rows[:, :-1]) if chat_val_rows is not None else None
    log(f"engram hashes: {time.time() - t1:.1f}s")
    nparam = sum(p.numel() for p in model.parameters())
    summary["params"] = {"total": int(nparam), "backbone": int(sum(p.numel() for p in model.backbone_parameters())),
                         "dspark": int(sum(p.numel() for p in model.dspark_parameters()))}
    log("params", json.dumps(summary["params"]))

    # ---- phase 3: backbone
    bb = [p for p in model.backbone_parameters()]
    decay = [p for p in bb if p.dim() >= 2]
    nodecay = [p for p in bb if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=ns.lr, betas=(0.9, 0.95), eps=1e-8)
    batches = Batches(rows, hashes, ns.batch, ns.seed, dev)
    dense_until = int(ns.steps * ns.dense_frac)
    qat_from = int(ns.steps * (1 - ns.qat_frac))
    model.train()
    t1 = time.time()
    for step in range(ns.steps):
        if over_budget(t1, ns.time_budget, "--time-budget", step, ns.steps, summary):
            break
        if step == qat_from:
            model.set_qat(True)
            log(f"step {step}: quantisation-aware from here")
        model.index_mode = "dense" if step < dense_until else "topk"
        set_lr(opt, lr_at(step, ns.steps, ns.lr, max(1, ns.steps // 50)))
        r, h = batches.next()
        x, y = r[:, :-1].clamp_min(0), r[:, 1:]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            out = model(x, h, targets=y)
        nll = out["nll"].sum() / (y >= 0).sum()
        loss = nll + ns.index_weight * out["index_loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(bb, 1.0)
        opt.step()
        for L in model.layers:
            L.ffn.update_bias(ns.bias_rate)
        if step % 50 == 0 or step == ns.steps - 1:
            el = time.time() - t1
            log(f"step {step}/{ns.steps} nll {nll.item():.4f} index_kl {out['index_loss'].item():.4f} "
                f"gnorm {gn.item():.2f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{(step + 1) * ns.batch * T / max(el, 1e-6):.0f} tok/s")
    model.index_mode = "topk"
    summary["backbone_seconds"] = round(time.time() - t1, 1)
    loads = [L.ffn.load.float() for L in model.layers]
    summary["expert_load_max_over_mean"] = round(float(max((l.max() / l.mean()) for l in loads)), 3)

    # ---- phase 4: DSpark on the frozen backbone
    for p in model.backbone_parameters():
        p.requires_grad_(False)
    dp = model.dspark_parameters()
    opt2 = torch.optim.AdamW(dp, lr=ns.dspark_lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator()
    gen.manual_seed(ns.seed + 3)
    mtp_qat_from = int(ns.dspark_steps * 0.7)
    for L in model.mtp:  # the stages start non-quantised even though the backbone is
        for m in L.modules():
            if isinstance(m, (mm.Lin, mm.Experts)):
                m.qat = False
    t1 = time.time()
    for step in range(ns.dspark_steps):
        if over_budget(t1, ns.dspark_time_budget, "--dspark-time-budget", step, ns.dspark_steps, summary):
            break
        if step == mtp_qat_from:
            model.set_qat(True)
        set_lr(opt2, lr_at(step, ns.dspark_steps, ns.dspark_lr, max(1, ns.dspark_steps // 20)))
        r, h = batches.next()
        x, anchors, toks = dspark_batch(model, r, h, ns.dspark_anchors, gen)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            ce, bce, acc = dspark_loss(model, x, h, anchors, toks)
        loss = ce + 0.1 * bce
        opt2.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(dp, 1.0)
        opt2.step()
        for L in model.mtp:
            L.ffn.update_bias(ns.bias_rate)
        if step % 50 == 0 or step == ns.dspark_steps - 1:
            log(f"dspark {step}/{ns.dspark_steps} ce {ce.item():.4f} conf_bce {bce.item():.4f} "
                f"draft top1 {acc:.3f}")
    summary["dspark_seconds"] = round(time.time() - t1, 1)
    model.set_qat(False)

    # ---- phase 5: export
    t1 = time.time()
    files = export_model(model, tok_path, mdir)
    summary["export"] = {"files": {os.path.relpath(f, mdir): os.path.getsize(f) for f in files},
                         "bytes": sum(os.path.getsize(f) for f in files)}
    log(f"export: {summary['export']['bytes']} bytes in {len(files)} files ({time.time() - t1:.1f}s)")
    with open(os.path.join(ns.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    # ---- evaluation
    ev = summary["eval"] = {}
    EB = 16

    def ppl(name, rws, hs, **kw):
        try:
            n, c = eval_nll(model, rws, hs, EB, dev, **kw)
            ev[name] = {"ppl": round(math.exp(n), 4), "nll": round(n, 5), "tokens": c}
            log(f"eval {name}: ppl {math.exp(n):.4f} ({c} tokens)")
        except Exception as e:  # keep the run's other results
            log(f"eval {name} FAILED: {e!r}")
    ppl("val_bf16", val_rows, val_h)
    ppl("val_fakequant", val_rows, val_h, qat=True)
    ppl("val_bf16_random_index", val_rows, val_h, mode="random")
    ppl("val_bf16_dense_index", val_rows, val_h, mode="dense")
    ppl("heldout_bf16", held_rows, held_h)
    ppl("heldout_fakequant", held_rows, held_h, qat=True)
    if chat_val_rows is not None:
        ppl("chat_val_bf16", chat_val_rows, chat_val_h)
    try:
        quant_eval(mdir, val_rows, val_h, held_rows, held_h, dev, ev)
    except Exception as e:
        log(f"quantised (baseline sim) eval FAILED: {e!r}")
    try:
        n_p = min(32, len(val_rows))
        start = T - 64
        seqs = torch.from_numpy(val_rows[:n_p, :start].astype(np.int64)).to(dev)

        def hfn(xx):
            return torch.from_numpy(hasher.rows(xx.cpu().numpy()).astype(np.int64)).to(dev)
        model.set_qat(True)
        seqs = greedy_extend(model, seqs, hfn, T - start, dev)
        acc, tau = acceptance(model, seqs, hfn(seqs), start, dev)
        model.set_qat(False)
        ev["dspark"] = {"accepted_drafts": round(acc, 4), "tokens_per_step": round(tau, 4),
                        "block": model.a.dspark_block_size, "prompts": n_p, "anchors_per_prompt": 64 - model.a.dspark_block_size}
        log(f"eval dspark: mean accepted drafts {acc:.3f} of {model.a.dspark_block_size} "
            f"(tokens per step {tau:.3f})")
    except Exception as e:
        log(f"dspark eval FAILED: {e!r}")
    try:
        ev["samples"] = samples(model, tok_path, hasher, dev, bos, eos, chat_va[:3])
    except Exception as e:
        log(f"samples FAILED: {e!r}")
    summary["seconds"] = round(time.time() - T0, 1)
    with open(os.path.join(ns.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("done", json.dumps(ev))


def encode_docs(tok_path, docs):
    """Many short documents at once (HF batch encode, special tokens matched)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    return [np.asarray(e.ids, np.int32) for e in tok.encode_batch(docs, add_special_tokens=False)]


def export_model(model, tok_path, mdir):
    import export
    return export.export(model, tok_path, mdir)


def quant_eval(mdir, val_rows, val_h, held_rows, held_h, dev, ev):
    """Perplexity of the EXPORTED checkpoint through tools/torch_ref/baseline.py
    with the in-graph quantisation simulations (sim=True)."""
    import baseline
    import weights
    import xp as xpmod
    X = xpmod.get("torch", str(dev), stable_topk=True)
    args, P = weights.from_checkpoint(mdir, X)
    for name, rws, hs in (("val_quant_ckpt", val_rows, val_h), ("heldout_quant_ckpt", held_rows, held_h)):
        t1 = time.time()
        m = baseline.Model(args, P, X, sim=True)
        tot, cnt = 0.0, 0
        B = 8
        with torch.no_grad():
            for s in range(0, len(rws), B):
                r = torch.from_numpy(rws[s:s + B].astype(np.int64)).to(dev)
                hh = torch.from_numpy(hs[s:s + B].astype(np.int64)).to(dev)
                st = baseline.State(m, r.shape[0], r.shape[1])
                lg = m.forward(st, r[:, :-1].clamp_min(0), hh)
                y = r[:, 1:]
                nll = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), y.clamp_min(0).reshape(-1),
                                      reduction="none").reshape(y.shape)
                tot += float((nll * (y >= 0)).sum())
                cnt += int((y >= 0).sum())
        ev[name] = {"ppl": round(math.exp(tot / cnt), 4), "nll": round(tot / cnt, 5), "tokens": cnt}
        log(f"eval {name}: ppl {math.exp(tot / cnt):.4f} ({cnt} tokens, {time.time() - t1:.1f}s)")


PROMPTS = ["It is a truth universally acknowledged", "In the beginning God created"]


def chat_prompt(doc):
    """The prompt part of a rendered conversation: up to its last assistant header."""
    i = doc.rfind("<｜Assistant｜>")
    j = i + len("<｜Assistant｜>")
    for tag in ("</think>", "<think>"):
        if doc.startswith(tag, j):
            return doc[:j + len(tag)], doc[j + len(tag):]
    return doc[:j], doc[j:]


def samples(model, tok_path, hasher, dev, bos, eos, chat_docs, n_new=40):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    out = []
    model.set_qat(True)

    def hfn(xx):
        return torch.from_numpy(hasher.rows(xx.cpu().numpy()).astype(np.int64)).to(dev)
    items = [(p, [bos] + tok.encode(p, add_special_tokens=False).ids, None) for p in PROMPTS]
    for d in chat_docs:
        p, ans = chat_prompt(d)
        items.append((p, tok.encode(p, add_special_tokens=False).ids, ans))
    for p, ids, ans in items:
        x = torch.tensor([ids], device=dev)
        y = greedy_extend(model, x, hfn, n_new, dev)[0, len(ids):].tolist()
        if eos in y:
            y = y[:y.index(eos) + 1]
        txt = tok.decode(y, skip_special_tokens=False)
        out.append({"prompt": p, "greedy": txt, **({"reference": ans} if ans is not None else {})})
        log(f"sample {p[-120:]!r} -> {txt!r}")
    model.set_qat(False)
    return out


if __name__ == "__main__":
    main()
