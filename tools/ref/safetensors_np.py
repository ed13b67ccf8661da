"""A small, independent safetensors reader and writer in numpy.

It shares no code with tide's C reader (src/io/), so each checks the other:
tests/test_safetensors.c writes checkpoints with the C writer and reads them
here, and the other way round. The numpy reference model loads checkpoints
through load().

    import safetensors_np as stn
    tensors = stn.load("/path/to/checkpoint_dir_or_file")
    dtype, shape, arr = tensors["layers.0.attn.wq_a.weight"]

Arrays returned by load():
  F32 F16 F64 I8 I16 I32 I64 U8 U16 U32 U64 BOOL: typed arrays of `shape`.
  BF16: uint16 array of `shape` (raw bits; bf16_to_f32() widens it).
  F8_E4M3 F8_E5M2 F8_E8M0: uint8 array of `shape` (raw codes).
  F4: uint8 array of shape[:-1] + [shape[-1] // 2] (two codes per byte, the low
      nibble holds the even element); flat if the last dim is odd.
Arrays are read-only views of a memory map unless copy=True.

Command line (used by the tests):
  safetensors_np.py dump PATH OUTDIR    one raw .bin per tensor + manifest.tsv
  safetensors_np.py resave PATH FILE    rewrite PATH as one file with save()
  safetensors_np.py selftest TMPDIR     save/load round trip, corrupt files refused
"""

import json
import os
import sys

import numpy as np

# dtype string -> (numpy dtype of the returned array, bits per element)
DTYPES = {
    "F64": (np.dtype("<f8"), 64),
    "F32": (np.dtype("<f4"), 32),
    "F16": (np.dtype("<f2"), 16),
    "BF16": (np.dtype("<u2"), 16),
    "F8_E4M3": (np.dtype("u1"), 8),
    "F8_E5M2": (np.dtype("u1"), 8),
    "F8_E8M0": (np.dtype("u1"), 8),
    "F4": (np.dtype("u1"), 4),
    "I64": (np.dtype("<i8"), 64),
    "I32": (np.dtype("<i4"), 32),
    "I16": (np.dtype("<i2"), 16),
    "I8": (np.dtype("i1"), 8),
    "U64": (np.dtype("<u8"), 64),
    "U32": (np.dtype("<u4"), 32),
    "U16": (np.dtype("<u2"), 16),
    "U8": (np.dtype("u1"), 8),
    "BOOL": (np.dtype("?"), 8),
}

INDEX_NAME = "model.safetensors.index.json"
MAX_HEADER = 100_000_000


def nbytes_of(dtype, shape):
    """Byte size implied by a dtype string and a shape (F4 needs an even count)."""
    count = 1
    for d in shape:
        count *= d
    bits = DTYPES[dtype][1]
    if bits == 4:
        if count % 2:
            raise ValueError("F4 tensor with an odd number of values (%d)" % count)
        return count // 2
    return count * bits // 8


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError("duplicate key %r in JSON" % k)
        seen[k] = v
    return seen


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_header(path):
    """Returns (entries, metadata, data_start, file_size) after validating
    the header of one file; entries: name -> (dtype, shape, begin, end)."""
    name = os.path.basename(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("%s: shorter than 8 bytes" % name)
        n = int.from_bytes(head, "little")
        if n < 2 or n > MAX_HEADER or 8 + n > size:
            raise ValueError("%s: bad header length %d (file is %d bytes)" % (name, n, size))
        raw = f.read(n)
    obj = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    if not isinstance(obj, dict):
        raise ValueError("%s: header is not a JSON object" % name)
    meta = obj.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("%s: __metadata__ must map strings to strings" % name)
    data_size = size - 8 - n
    entries = {}
    for tname, e in obj.items():
        where = "%s: tensor %r" % (name, tname)
        if not isinstance(e, dict):
            raise ValueError(where + ": not an object")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in DTYPES:
            raise ValueError(where + ": unknown dtype %r" % (dtype,))
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise ValueError(where + ": bad shape")
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_count(o) for o in offs):
            raise ValueError(where + ": bad data_offsets")
        begin, end = offs
        if begin > end or end > data_size:
            raise ValueError(where + ": data_offsets %r outside %d bytes of data" % (offs, data_size))
        if end - begin != nbytes_of(dtype, shape):
            raise ValueError(where + ": size does not match dtype and shape")
        entries[tname] = (dtype, tuple(shape), begin, end)
    pos = 0
    for tname, (_, _, begin, end) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if begin != pos:
            raise ValueError("%s: tensor %r starts at %d, expected %d" % (name, tname, begin, pos))
        pos = end
    if pos != data_size:
        raise ValueError("%s: %d bytes of data, tensors cover %d" % (name, data_size, pos))
    return entries, meta, 8 + n, size


def _array(mm, dtype, shape, begin, end, copy):
    npdt, bits = DTYPES[dtype]
    raw = mm[begin:end]
    if bits == 4:
        arr = raw
        if shape and shape[-1] % 2 == 0:
            arr = raw.reshape(tuple(shape[:-1]) + (shape[-1] // 2,))
    else:
        arr = raw.view(npdt).reshape(shape)
    return arr.copy() if copy else arr


def load_file(path, copy=False):
    entries, _, start, size = read_header(path)
    out = {}
    if size == start:
        mm = np.zeros(0, dtype=np.uint8)
    else:
        mm = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(size - start,))
    for tname, (dtype, shape, begin, end) in entries.items():
        out[tname] = (dtype, shape, _array(mm, dtype, shape, begin, end, copy))
    return out


def load(path_or_dir, copy=False):
    """name -> (dtype string, shape tuple, numpy array); see the module doc."""
    path = path_or_dir
    if os.path.isdir(path):
        index = os.path.join(path, INDEX_NAME)
        if not os.path.exists(index):
            return load_file(os.path.join(path, "model.safetensors"), copy)
        path = index
    if not path.endswith(".index.json"):
        return load_file(path, copy)
    with open(path, "rb") as f:
        idx = json.loads(f.read().decode("utf-8"), object_pairs_hook=_no_duplicates)
    wmap = idx.get("weight_map") if isinstance(idx, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise ValueError("%s: missing or empty weight_map" % INDEX_NAME)
    base = os.path.dirname(path)
    out = {}
    for shard in sorted(set(wmap.values())):
        if not isinstance(shard, str) or "/" in shard or shard in ("", ".", ".."):
            raise ValueError("%s: bad shard name %r" % (INDEX_NAME, shard))
        for tname, t in load_file(os.path.join(base, shard), copy).items():
            if wmap.get(tname) != shard:
                raise ValueError("%s: tensor %r not indexed under this shard" % (shard, tname))
            out[tname] = t
    missing = set(wmap) - set(out)
    if missing:
        raise ValueError("%s names tensors absent from their shards: %r" % (INDEX_NAME, sorted(missing)[:5]))
    return out


def bf16_to_f32(a):
    """uint16 bf16 bits -> float32 values."""
    return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def save(path, tensors, metadata=None):
    """Writes one safetensors file. tensors: name -> (dtype string, shape,
    array or bytes holding exactly the tensor's bytes). Tensors are laid out
    in name order, header padded with spaces to 8 bytes."""
    meta = {"format": "pt"}
    meta.update(metadata or {})
    header = {"__metadata__": meta}
    blobs = []
    pos = 0
    for tname in sorted(tensors):
        dtype, shape, data = tensors[tname]
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1).tobytes() if isinstance(data, np.ndarray) else bytes(data)
        if len(raw) != nbytes_of(dtype, shape):
            raise ValueError("tensor %r: %d bytes for %s %r" % (tname, len(raw), dtype, list(shape)))
        header[tname] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


def _dump(path, outdir):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "manifest.tsv"), "w") as man:
        for i, (tname, (dtype, shape, arr)) in enumerate(sorted(load(path).items())):
            fname = "%d.bin" % i
            with open(os.path.join(outdir, fname), "wb") as f:
                f.write(np.ascontiguousarray(arr).view(np.uint8).tobytes())
            man.write("%s\t%s\t%s\t%s\n" % (tname, dtype, ",".join(str(d) for d in shape), fname))


def _resave(path, out):
    tensors = {k: (d, s, np.asarray(a)) for k, (d, s, a) in load(path).items()}
    save(out, tensors, {"writer": "safetensors_np"})


def _selftest(tmpdir):
    """Round trip through save()/load() and a few files load() must refuse."""
    rng = np.random.default_rng()
    tensors = {}
    for i, dtype in enumerate(sorted(DTYPES)):
        shape = (2, 4) if i % 2 else (3,)
        if dtype == "F4":
            shape = (2, 6)
        raw = rng.integers(0, 256, nbytes_of(dtype, shape), dtype=np.uint8)
        tensors["t.%s" % dtype] = (dtype, shape, raw)
    path = os.path.join(tmpdir, "self.safetensors")
    save(path, tensors)
    back = load(path, copy=True)
    assert sorted(back) == sorted(tensors)
    for k, (dtype, shape, raw) in tensors.items():
        d2, s2, arr = back[k]
        assert d2 == dtype and tuple(s2) == tuple(shape), k
        assert arr.view(np.uint8).tobytes() == raw.tobytes(), k
    assert back["t.F4"][2].shape == (2, 3)
    assert np.array_equal(bf16_to_f32(np.array([0x3F80, 0xC000], np.uint16)), np.array([1.0, -2.0], np.float32))
    good = open(path, "rb").read()
    n = int.from_bytes(good[:8], "little")
    bad = {
        "truncated": good[:-1],
        "extra byte": good + b"\0",
        "short": good[:5],
        "huge length": (1 << 40).to_bytes(8, "little") + good[8:],
        "duplicate": None,
    }
    hdr = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    bad["duplicate"] = len(hdr).to_bytes(8, "little") + hdr + b"x"
    hdr = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}'
    bad["size mismatch"] = len(hdr).to_bytes(8, "little") + hdr + b"xxxx"
    hdr = b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}'
    bad["overlap"] = len(hdr).to_bytes(8, "little") + hdr + b"xxx"
    assert n % 8 == 0
    for what, blob in bad.items():
        p = os.path.join(tmpdir, "bad.safetensors")
        with open(p, "wb") as f:
            f.write(blob)
        try:
            load(p)
        except (ValueError, UnicodeDecodeError):
            continue
        raise AssertionError("load() accepted a file with: " + what)
    print("safetensors_np selftest ok")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "dump":
        _dump(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "resave":
        _resave(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "selftest":
        _selftest(sys.argv[2])
    else:
        sys.exit(__doc__)
