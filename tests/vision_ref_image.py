#!/usr/bin/python3
"""Oracle for the vision path's image preprocessing (tests/test_vision_image.c).

    vision_ref_image.py DIR SEED

Writes random images (PNG, JPEG, WebP, GIF, with PIL from Debian's
python3-pil) of sizes that exercise every branch of the release's grid plan
(up-scaling to min_pixels, shrinking to max_image_tokens, the one-column and
one-row collapses, the aspect limit), and for each the tower input the
release's image_processor.py makes from it: PIL's open + convert("RGB"), the
plan, ImageOps.pad (or a plain resize beyond the aspect limit), the
normalisation, BF16, the patch cut. DIR/cases.txt lists one case per line:

    FILE W H PATCH RATIO MAX_TOKENS MIN_PIXELS MAX_WH BEST_W BEST_H N_LLM_H N_LLM_W EXPECTED_F32

The plan below is written from docs/vision.md, independently of the C code."""
import math
import os
import sys

import numpy as np
from PIL import Image, ImageOps


def bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def tokens(gh, gw):
    return gh * (gw + 1) + 2


def grid(bh, bw, p, r):
    return math.ceil((bh // p) / r), math.ceil((bw // p) / r)


def plan(width, height, p, r, max_tok, min_px, max_wh):
    if max_wh and width > height * max_wh:
        width = height * max_wh
    if 0 < width * height < min_px:
        s = (min_px / (width * height)) ** 0.5
        width, height = int(width * s), int(height * s)
    bw, bh = math.ceil(width / p) * p, math.ceil(height / p) * p
    gh, gw = grid(bh, bw, p, r)
    if tokens(gh, gw) > max_tok:
        a = height / width
        mw = math.sqrt((max_tok - 2) / a + 0.25) - 0.5
        mh = mw * a
        cell = p * r
        if mw < 1.0:
            bh, bw = (max_tok - 2) // 2 * cell, cell
        elif mh < 1.0:
            bh, bw = cell, (max_tok - 3) * cell
        else:
            beta = min(math.floor(mw) * cell / width, math.floor(mh) * cell / height)
            bh, bw = math.floor(height * beta / p) * p, math.floor(width * beta / p) * p
        gh, gw = grid(bh, bw, p, r)
        assert tokens(gh, gw) <= max_tok
    return bw, bh, gh, gw


def patches(path, p, r, max_tok, min_px, max_wh):
    with Image.open(path) as src:
        im = src.convert("RGB")
    bw, bh, gh, gw = plan(im.width, im.height, p, r, max_tok, min_px, max_wh)
    if max_wh and im.width >= max_wh * im.height:
        im = im.resize((bw, bh))
    else:
        im = ImageOps.pad(im, (bw, bh), color=(127, 127, 127))
    x = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
    x = bf16((x - np.float32(0.5)) / np.float32(0.5))
    vh, vw = bh // p, bw // p
    out = x.reshape(3, vh, p, vw, p).transpose(1, 3, 0, 2, 4).reshape(vh * vw, 3, p, p)
    return out, bw, bh, gh, gw


def random_image(rng, w, h, smooth):
    if smooth:  # a gradient plus noise: what resizing meets in photos
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1), (xx + yy) * 127 / max(w + h, 1)], -1)
        a = base + rng.normal(0, 20, (h, w, 3))
    else:
        a = rng.integers(0, 256, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def main():
    d, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    tiny = (14, 3, 64, 112 * 112)
    small = (14, 2, 256, 224 * 224)
    flash = (14, 3, 1024, 544 * 544)
    sizes = [  # (w, h, config, max_wh, format, mode)
        (37, 23, tiny, 0, "png", "RGB"),          # up-scaled to min_pixels
        (300, 200, tiny, 0, "png", "RGBA"),        # shrunk to the token budget; alpha dropped
        (500, 9, tiny, 0, "png", "L"),             # very wide: one row
        (7, 400, tiny, 0, "png", "P"),             # very tall: one column
        (333, 101, small, 0, "jpeg", "RGB"),
        (130, 90, small, 2, "png", "RGB"),         # within the aspect limit
        (400, 60, small, 4, "png", "RGB"),         # beyond it: a plain stretch
        (211, 157, flash, 0, "webp", "RGB"),       # lossless WebP, up-scaled
        (96, 80, tiny, 0, "gif", "P"),
        (900, 700, flash, 0, "png", "RGB"),        # shrunk, flash budget
        (int(rng.integers(20, 400)), int(rng.integers(20, 400)), small, 0, "png", "RGB"),
        (int(rng.integers(20, 400)), int(rng.integers(20, 400)), tiny, 0, "jpeg", "RGB"),
    ]
    lines = []
    for i, (w, h, (p, r, mt, mp), mwh, fmt, mode) in enumerate(sizes):
        im = random_image(rng, w, h, smooth=i % 2 == 0)
        if mode == "RGBA":
            im.putalpha(Image.fromarray(rng.integers(0, 256, (h, w)).astype(np.uint8)))
        elif mode in ("L", "P"):
            im = im.convert(mode)
        name = f"img{i}.{fmt}"
        path = os.path.join(d, name)
        if fmt == "webp":
            im.save(path, lossless=True)
        elif fmt == "jpeg":
            im.save(path, quality=85)
        else:
            im.save(path)
        x, bw, bh, gh, gw = patches(path, p, r, mt, mp, mwh)
        exp = f"exp{i}.f32"
        x.astype(np.float32).tofile(os.path.join(d, exp))
        lines.append(f"{name} {w} {h} {p} {r} {mt} {mp} {mwh} {bw} {bh} {gh} {gw} {exp}")
    open(os.path.join(d, "cases.txt"), "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
