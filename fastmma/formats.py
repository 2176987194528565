"""Number formats of the PTX matrix instructions: how the bits of each are read and written.

Every element type a ``wgmma`` or ``wmma`` operand can have is described here once, as data:
its width, its floating-point fields, and the numpy / ml_dtypes dtype that holds one value in
a user's array.  The functions convert between user arrays (numpy, array-likes, torch
tensors: :func:`as_numpy`) and raw bit patterns; the numba kernels only ever see bit patterns.

Sub-byte types are given one element per byte in user arrays: ``s4`` as ``int8`` in [-8, 7],
``u4`` as ``uint8`` in [0, 15] and ``b1`` as ``bool`` or ``uint8`` in {0, 1}.  ``tf32`` is
given as ``float32`` (or its ``uint32`` bits); the hardware ignores the low 13 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import OperandError


@dataclass(frozen=True)
class Format:
    """One PTX element type.

    ``bits`` is the width of one element in memory and registers.  Floating-point formats
    also give ``exp_bits``, ``man_bits`` (stored fraction bits), ``bias`` and whether the
    all-ones exponent encodes infinities (``ieee_specials``; e4m3 instead has a single NaN
    mantissa and no infinity).  ``storage`` is the unsigned integer dtype of one element's
    bits; ``value_dtype`` the dtype of user arrays.
    """

    name: str
    bits: int
    kind: str  # "float", "int", "uint" or "bits"
    storage: np.dtype
    value_dtype: np.dtype
    exp_bits: int = 0
    man_bits: int = 0
    bias: int = 0
    ieee_specials: bool = True
    ignored_low_bits: int = 0

    @property
    def is_float(self) -> bool:
        """Whether the format is a floating-point one (f16, bf16, tf32, f32, f64, e4m3, e5m2)."""
        return self.kind == "float"

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal number (subnormals share it)."""
        return 1 - self.bias

    @property
    def code(self) -> int:
        """Small integer that names the format inside numba kernels."""
        return FORMAT_CODES[self.name]


def _float(name, bits, storage, value_dtype, e, m, bias, ieee=True, ignored=0):
    return Format(name, bits, "float", np.dtype(storage), np.dtype(value_dtype), e, m, bias, ieee, ignored)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        _float("f64", 64, np.uint64, np.float64, 11, 52, 1023),
        _float("f32", 32, np.uint32, np.float32, 8, 23, 127),
        _float("tf32", 32, np.uint32, np.float32, 8, 10, 127, ignored=13),
        _float("f16", 16, np.uint16, np.float16, 5, 10, 15),
        _float("bf16", 16, np.uint16, ml_dtypes.bfloat16, 8, 7, 127),
        _float("e4m3", 8, np.uint8, ml_dtypes.float8_e4m3fn, 4, 3, 7, ieee=False),
        _float("e5m2", 8, np.uint8, ml_dtypes.float8_e5m2, 5, 2, 15),
        Format("s32", 32, "int", np.dtype(np.uint32), np.dtype(np.int32)),
        Format("s8", 8, "int", np.dtype(np.uint8), np.dtype(np.int8)),
        Format("u8", 8, "uint", np.dtype(np.uint8), np.dtype(np.uint8)),
        Format("s4", 4, "int", np.dtype(np.uint8), np.dtype(np.int8)),
        Format("u4", 4, "uint", np.dtype(np.uint8), np.dtype(np.uint8)),
        Format("b1", 1, "bits", np.dtype(np.uint8), np.dtype(np.uint8)),
    )
}

FORMAT_CODES = {name: i for i, name in enumerate(FORMATS)}


def get_format(name: str) -> Format:
    """The :class:`Format` called ``name`` (a PTX type without its dot, e.g. ``"bf16"``)."""
    try:
        return FORMATS[name.lstrip(".")]
    except KeyError:
        raise OperandError(f"unknown element type {name!r}; known: {', '.join(FORMATS)}") from None


def _int_range(fmt: Format) -> tuple[int, int]:
    if fmt.kind == "int":
        return -(1 << (fmt.bits - 1)), (1 << (fmt.bits - 1)) - 1
    return 0, (1 << fmt.bits) - 1


def is_int(x) -> bool:
    """Whether ``x`` is a Python or numpy integer (a bool is not one)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def byte_image(data, name: str) -> np.ndarray:
    """A private copy of a memory image given as bytes or a non-empty 1-D uint8 array."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        image = np.frombuffer(bytes(data), np.uint8)
    else:
        image = as_numpy(data, name)
    if image.dtype != np.uint8 or image.ndim != 1 or image.size == 0:
        raise OperandError(f"{name} must be a non-empty 1-D uint8 image, got dtype {image.dtype}, shape {image.shape}")
    return image.copy()


def as_numpy(x, name: str = "operand") -> np.ndarray:
    """A numpy array from a numpy array, array-like or torch tensor (bf16/fp8 tensors become
    ml_dtypes arrays).  An array in the other byte order (``>f2`` on a little-endian host,
    as data read from a file or a network often is) comes back as a copy in the host's: the
    values are the same, and the kernels read native bits."""
    if type(x).__module__.startswith("torch"):
        return _from_torch(x, name)
    try:
        arr = np.asarray(x)
    except Exception as exc:  # noqa: BLE001 - anything numpy cannot take
        raise OperandError(f"{name} must be an array, got {type(x).__name__} ({exc})") from exc
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _from_torch(t, name: str) -> np.ndarray:
    """The tensor's values in host memory as numpy sees them.  A tensor that has none to give
    (a ``meta`` or sparse tensor) or whose dtype numpy cannot hold (quantized, complex32,
    the fnuz fp8 types) is an :class:`OperandError`, not torch's own exception."""
    import ml_dtypes
    import torch

    special = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16)}
    for dtype_name, target in (("float8_e4m3fn", ml_dtypes.float8_e4m3fn), ("float8_e5m2", ml_dtypes.float8_e5m2)):
        if hasattr(torch, dtype_name):
            special[getattr(torch, dtype_name)] = (torch.uint8, target)
    try:
        t = t.detach().cpu().contiguous()
        if t.dtype in special:
            raw, target = special[t.dtype]
            return t.view(raw).numpy().view(target)
        return t.numpy()
    except Exception as exc:  # noqa: BLE001 - torch raises TypeError, RuntimeError or NotImplementedError
        layout = "" if t.layout == torch.strided else f", layout {t.layout}"
        raise OperandError(
            f"{name} must be a dense tensor with data (on any device) of a dtype numpy or ml_dtypes can hold, "
            f"got dtype {t.dtype} on {t.device}{layout} ({type(exc).__name__}: {exc})") from exc


def non_finite(bits: np.ndarray, fmt: Format | str) -> np.ndarray:
    """Where raw bits of ``fmt`` (its storage dtype) encode an infinity or NaN: the exponent
    field all ones (e4m3, which has no infinity: exponent and fraction all ones); nowhere for
    integer formats."""
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    if not fmt.is_float:
        return np.zeros(np.shape(bits), bool)
    x = np.asarray(bits)
    # in the storage's own width: widened to int64, the temporaries were 4-8 times B's size
    x = x.view(f"u{x.dtype.itemsize}") >> fmt.ignored_low_bits  # tf32: a float32's top 19 bits
    ones_e, ones_m = (1 << fmt.exp_bits) - 1, (1 << fmt.man_bits) - 1
    special = ((x >> fmt.man_bits) & ones_e) == ones_e
    return special if fmt.ieee_specials else special & ((x & ones_m) == ones_m)


def to_bits(values, fmt: Format | str, name: str = "operand") -> np.ndarray:
    """Raw bit patterns (``fmt.storage`` dtype, C-contiguous) of a user array of ``fmt`` values.

    Accepts an array (or torch tensor, :func:`as_numpy`) of ``fmt.value_dtype``, or of
    ``fmt.storage`` holding the bits already.  Sub-byte integers are range-checked.  Raises
    :class:`OperandError` for any other dtype, naming ``name``.
    """
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    if type(values) is np.ndarray and values.dtype == fmt.value_dtype and fmt.bits >= 8:
        return np.ascontiguousarray(values).view(fmt.storage)  # the usual call: no checks to make
    arr = as_numpy(values, name)
    if fmt.is_float:
        if arr.dtype == fmt.value_dtype or (fmt.bits == 32 and arr.dtype == np.float32):
            return np.ascontiguousarray(arr).view(fmt.storage)
        if arr.dtype == fmt.storage:
            return np.ascontiguousarray(arr)
        raise OperandError(
            f"{name} must hold {fmt.name} values: dtype {fmt.value_dtype} (or its raw bits as "
            f"{fmt.storage}), got dtype {arr.dtype}"
        )
    if fmt.name == "b1" and arr.dtype == np.bool_:
        return arr.astype(np.uint8, order="C")
    if arr.dtype.kind not in "iub":
        raise OperandError(f"{name} must hold {fmt.name} integers, got dtype {arr.dtype}")
    if fmt.bits >= 8 and arr.dtype not in (fmt.value_dtype, fmt.storage):
        raise OperandError(
            f"{name} must hold {fmt.name} values: dtype {fmt.value_dtype} (or raw bits as "
            f"{fmt.storage}), got dtype {arr.dtype}"
        )
    if fmt.bits < 8:
        lo, hi = _int_range(fmt)
        if arr.size and (arr.min() < lo or arr.max() > hi):
            raise OperandError(
                f"{name} holds {fmt.name} values, which must lie in [{lo}, {hi}]; "
                f"got values in [{arr.min()}, {arr.max()}]"
            )
        return (arr.astype(np.int64) & ((1 << fmt.bits) - 1)).astype(np.uint8, order="C")
    return np.ascontiguousarray(arr).view(fmt.storage)


def from_bits(bits, fmt: Format | str) -> np.ndarray:
    """User-facing values (``fmt.value_dtype``) of raw bit patterns."""
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    if type(bits) is np.ndarray and bits.dtype == fmt.storage and fmt.bits >= 8 and bits.flags.c_contiguous:
        return bits.view(fmt.value_dtype)
    bits = np.asarray(bits)
    if fmt.bits < 8:
        v = bits.astype(np.int16) & ((1 << fmt.bits) - 1)
        if fmt.kind == "int":
            v = np.where(v >= (1 << (fmt.bits - 1)), v - (1 << fmt.bits), v)
        return v.astype(fmt.value_dtype)
    return np.ascontiguousarray(bits.astype(fmt.storage, copy=False)).view(fmt.value_dtype)
