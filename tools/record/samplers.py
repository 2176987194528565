"""Random element bit patterns for the data-distribution modes of FORMAT.md (local side).

Every function returns raw bits in the storage dtype of the type (uint8/16/32/64); tf32 is a
32-bit word whose low 13 bits are random.
"""

from __future__ import annotations

import numpy as np

# name: (bits, exp_bits, man_bits, bias, kind)  kind: ieee | e4m3 | int | uint | b1
TYPES = {
    "f64": (64, 11, 52, 1023, "ieee"),
    "f32": (32, 8, 23, 127, "ieee"),
    "tf32": (32, 8, 10, 127, "ieee"),
    "f16": (16, 5, 10, 15, "ieee"),
    "bf16": (16, 8, 7, 127, "ieee"),
    "e4m3": (8, 4, 3, 7, "e4m3"),
    "e5m2": (8, 5, 2, 15, "ieee"),
    "s32": (32, 0, 0, 0, "int"),
    "s8": (8, 0, 0, 0, "int"),
    "u8": (8, 0, 0, 0, "uint"),
    "s4": (4, 0, 0, 0, "int"),
    "u4": (4, 0, 0, 0, "uint"),
    "b1": (1, 0, 0, 0, "b1"),
}

STORAGE = {64: np.uint64, 32: np.uint32, 16: np.uint16, 8: np.uint8, 4: np.uint8, 1: np.uint8}


def storage(t: str):
    return STORAGE[TYPES[t][0]]


def _fields(t):
    bits, eb, mb, bias, kind = TYPES[t]
    # tf32 keeps its 10 fraction bits at the top of the 23-bit f32 fraction
    shift = 13 if t == "tf32" else 0
    return bits, eb, mb, bias, kind, shift


def emax(t: str) -> int:
    bits, eb, mb, bias, kind, _ = _fields(t)
    return (1 << eb) - 1 - bias - (0 if kind == "e4m3" else 1)


def emin(t: str) -> int:
    return 1 - TYPES[t][3]


def make(t: str, sign, exp, man) -> np.ndarray:
    """Bits of (-1)^sign * 1.man * 2^exp (normal; ``man`` an integer < 2^man_bits)."""
    bits, eb, mb, bias, kind, shift = _fields(t)
    dt = STORAGE[bits]
    sign = np.asarray(sign, dtype=np.uint64)
    e = (np.asarray(exp, dtype=np.int64) + bias).astype(np.uint64)
    m = np.asarray(man, dtype=np.uint64)
    width = eb + mb + shift
    return ((sign << np.uint64(width)) | (e << np.uint64(mb + shift)) | (m << np.uint64(shift))).astype(dt)


def value(t: str, x: float) -> int:
    """Bits of an exactly representable float ``x`` (normal, subnormal or zero) of type t."""
    bits, eb, mb, bias, kind, shift = _fields(t)
    if x == 0:
        return (1 << (bits - 1)) if np.signbit(x) else 0
    sign = 1 if x < 0 else 0
    m, e = np.frexp(abs(x))  # abs(x) = m * 2^e, m in [0.5, 1)
    e = int(e) - 1
    frac = float(m) * 2  # [1, 2)
    if e < 1 - bias:  # subnormal
        f = abs(x) / 2.0 ** (1 - bias - mb)
        if f != int(f):
            raise ValueError(f"{x} is not representable in {t}")
        return (sign << (bits - 1)) | (int(f) << shift)
    f = (frac - 1) * 2 ** mb
    if f != int(f) or e > emax(t):
        raise ValueError(f"{x} is not representable in {t}")
    return (sign << (bits - 1)) | ((e + bias) << (mb + shift)) | (int(f) << shift)


def _low(rng, t, shape):
    """Random low bits that tf32 ignores."""
    if t == "tf32":
        return rng.integers(0, 1 << 13, size=shape, dtype=np.uint64).astype(np.uint32)
    return np.zeros(shape, dtype=storage(t))


def normal(rng, t, shape, lo, hi):
    bits, eb, mb, bias, kind, shift = _fields(t)
    lo, hi = max(lo, emin(t)), min(hi, emax(t))
    e = rng.integers(lo, hi + 1, size=shape)
    m = rng.integers(0, 1 << mb, size=shape, dtype=np.uint64)
    if kind == "e4m3":  # 0x7F/0xFF is NaN: avoid exponent 8 with mantissa 7
        m = np.where(e == emax(t), np.minimum(m, 6), m).astype(np.uint64)
    s = rng.integers(0, 2, size=shape)
    return make(t, s, e, m) | _low(rng, t, shape)


def subnormal(rng, t, shape):
    bits, eb, mb, bias, kind, shift = _fields(t)
    m = rng.integers(1, 1 << mb, size=shape, dtype=np.uint64)
    s = rng.integers(0, 2, size=shape).astype(np.uint64)
    out = ((s << np.uint64(bits - 1)) | (m << np.uint64(shift))).astype(storage(t))
    return out | _low(rng, t, shape)


def specials(t: str) -> list:
    """A list of special bit patterns: zeros, infinities, NaNs, max finite, min subnormal."""
    bits, eb, mb, bias, kind, shift = _fields(t)
    sign = 1 << (bits - 1)
    emask = ((1 << eb) - 1) << (mb + shift)
    out = [0, sign, 1 << shift, sign | (1 << shift)]
    if kind == "e4m3":
        out += [0x7F, 0xFF, 0x7E, 0xFE]
        return out
    quiet = 1 << (mb - 1 + shift)
    maxf = emask - (1 << (mb + shift)) | (((1 << mb) - 1) << shift)
    out += [emask, sign | emask, maxf, sign | maxf,
            emask | quiet, sign | emask | quiet,  # canonical quiet NaNs
            emask | quiet | (5 << shift), emask | (3 << shift),  # quiet with payload, signalling
            sign | emask | (1 << shift), emask | quiet | (((1 << mb) - 1) << shift)]
    if mb >= 4:
        out += [emask | (((1 << (mb - 1)) - 1) << shift), sign | emask | quiet | (0x9 << shift)]
    return out


def sample(rng, t: str, shape, mode: int, role: str = "ab", out_type: str | None = None):
    """Bits of type ``t`` for data-distribution ``mode``; ``role`` "ab" (operand) or "c"."""
    bits, eb, mb, bias, kind, shift = _fields(t)
    shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    if kind == "b1":
        return rng.integers(0, 2, size=shape, dtype=np.uint8)
    if kind in ("int", "uint"):
        dt = STORAGE[bits]
        if kind == "int":
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        else:
            lo, hi = 0, (1 << bits) - 1
        if mode == 5:
            if role == "c":
                base = rng.choice([lo, hi], size=shape)
                v = base - np.sign(base) * rng.integers(0, 1 << 20, size=shape)
            else:
                v = rng.choice([lo, hi, lo + 1, hi - 1, 0], size=shape, p=[.35, .35, .1, .1, .1])
        else:
            v = rng.integers(lo, hi + 1, size=shape, dtype=np.int64)
        return (np.asarray(v, dtype=np.int64) & ((1 << bits) - 1)).astype(dt)
    out_type = out_type or t
    if mode in (0, 3):  # mode 3: narrow operands; the caller sets C close to -(A.B)
        return normal(rng, t, shape, -3, 3)
    if mode == 1:
        return normal(rng, t, shape, -20, 20) if role == "c" else normal(rng, t, shape, -10, 10)
    if mode == 2:
        which = rng.random(shape)
        a = subnormal(rng, t, shape)
        b = normal(rng, t, shape, emin(t), emin(t) + 3)
        c = normal(rng, t, shape, emax(t) - 3, emax(t)) if role == "ab" else normal(rng, t, shape, emin(t), emin(t) + 8)
        z = np.where(rng.random(shape) < 0.5, 0, 1 << (bits - 1)).astype(storage(t))
        return np.where(which < 0.5, a, np.where(which < 0.75, b, np.where(which < 0.9, c, z))).astype(storage(t))
    if mode == 4:
        base = normal(rng, t, shape, -3, 3)
        sp = np.array(specials(t), dtype=storage(t))
        pick = sp[rng.integers(0, len(sp), size=shape)]
        return np.where(rng.random(shape) < 0.15, pick, base).astype(storage(t))
    if mode == 5:
        top = emax(out_type)
        if role == "c":
            return normal(rng, t, shape, top - 2, top)
        # operands whose products land near the output's largest binade
        e = max(min(emax(t), (top + 1) // 2 - 1), emin(t))
        return normal(rng, t, shape, e - 2, e + 1)
    raise ValueError(f"mode {mode}")
