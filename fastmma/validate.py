"""The argument checks that every public entry point runs before it does any work.

The error contract (issue 76): a bad argument is a :class:`~fastmma.errors.FastmmaError` whose
message names the argument, says what is allowed, and quotes at most a short, elided excerpt of
what was given (:func:`excerpt`, :func:`shorten`); an array that a call writes is written in
place or refused before anything is written (:func:`output_array`, :func:`writeback`); an operand
whose decoding would not fit in memory is refused before the allocation, with the bytes it needs
(:func:`decoded`); a file's array headers are checked against its bytes before any array is
read (:func:`read_npz`).  The checks live here, below every module that takes user arguments, so
that each entry point validates through the same code.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re

import numpy as np

from .errors import FastmmaError, OperandError

#: a message longer than this has its quotes of the input elided to :data:`EXCERPT` characters
#: (:func:`shorten`); a message's own words stay under it
MESSAGE_TARGET = 300

#: the longest message an entry point lets out: past it, the middle is cut (a last resort, which
#: may cut what is allowed: the tests hold every message they meet to MESSAGE_TARGET)
MESSAGE_LIMIT = 400

#: the longest excerpt of an argument a message quotes
EXCERPT = 60

_LONG_WORD = re.compile(r"\S{%d,}" % (EXCERPT + 1))


def excerpt(value, limit: int = EXCERPT) -> str:
    """``repr(value)``, its middle elided to keep it within ``limit`` characters."""
    if isinstance(value, np.ndarray) and value.size > 8:  # a small one's repr says more, and briefly
        return f"array of shape {value.shape}, dtype {value.dtype}"
    text = value if isinstance(value, str) else _safe_repr(value)
    return _elide(text, limit)


def quote(value, limit: int = EXCERPT) -> str:
    """``value`` as a message quotes it: a string in quotes, anything else as :func:`excerpt`
    gives it; elided to ``limit`` characters."""
    return _elide(repr(value), limit) if isinstance(value, str) else excerpt(value, limit)


def _safe_repr(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 200:
        return f"<int of {abs(value).bit_length()} bits>"  # repr of a huge int is slow and refused past 4300 digits
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a caller's object whose repr fails
        return f"<{type(value).__name__}>"


def _elide(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 8) // 2
    return f"{text[:keep]}...({len(text) - 2 * keep} chars)...{text[-keep:]}"


def shorten(message: str) -> str:
    """``message`` with every long run of non-blank characters (an echoed input) elided, where
    it is longer than :data:`MESSAGE_TARGET`, and its middle cut past :data:`MESSAGE_LIMIT`."""
    if len(message) <= MESSAGE_TARGET:
        return message
    message = _LONG_WORD.sub(lambda m: _elide(m.group(0), EXCERPT), message)
    return _elide(message, MESSAGE_LIMIT)


def public(func):
    """An entry point whose :class:`FastmmaError` messages go through :func:`shorten`."""
    @functools.wraps(func)
    def checked(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except FastmmaError as exc:
            message = str(exc)
            if len(message) > MESSAGE_TARGET:
                exc.args = (shorten(message),)
            raise
        except MemoryError as exc:  # past the checks made before the work: numpy's message says how much
            raise OperandError(f"out of memory while running {func.__qualname__}: {shorten(str(exc))}; "
                               f"pass smaller operands") from None
    return checked


def integer(value, name: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as a Python int, checked to be an integer (not a bool, float or string) in
    ``[lo, hi]`` (each bound where given)."""
    span = f" in [{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OperandError(f"{name} must be an integer{span}, got {excerpt(value)} ({type(value).__name__})")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise OperandError(f"{name} must be an integer{span}, got {excerpt(int(value))}")
    return int(value)


def available_memory() -> int | None:
    """Bytes this process may still allocate, as far as the system says: the least of the
    available physical memory, the cgroup's limit and the address-space limit (None: unknown)."""
    limits = []
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/fs/cgroup/memory.max") as f:
            text = f.read().strip()
        if text != "max":
            limits.append(int(text))
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft - _address_space_used())
    return min(limits) if limits else None


def _address_space_used() -> int:
    """This process's virtual memory size in bytes (0 where /proc does not say)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    return 0


def require_memory(nbytes: int, name: str, why: str, advice: str = "pass a smaller array") -> None:
    """Refuse (before anything is allocated) a call that needs ``nbytes`` for ``why``, where
    more than this process may allocate."""
    have = available_memory()
    if have is not None and nbytes > have:
        raise OperandError(f"{name}: needs {_gib(nbytes)} of memory for {why}, more than the {_gib(have)} "
                           f"available; {advice}")


def working_set(operands: dict, nbytes: int, m: int, k: int, n: int, batch: int = 1, *,
                what: str = "decoding a", advice: str = "pass smaller operands") -> None:
    """Refuse, before anything is allocated, a product of ``batch`` M x K by K x N matrices whose
    working set would not fit: ``nbytes`` for its decoded operands, result and scratch, beside a
    contiguous copy of each strided or broadcast array of ``operands`` (name -> array)."""
    copies = sum(x.nbytes for x in operands.values() if isinstance(x, np.ndarray) and not x.flags.c_contiguous)
    product = f"{what} {m} x {k} by {k} x {n} product" + (f" ({batch} of them)" if batch > 1 else "")
    *first, last = operands
    names = f"{', '.join(first)} and {last}" if first else last
    require_memory(copies + nbytes, names, product, advice)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**27 else f"{nbytes / 2**20:.1f} MiB"


def copy_bytes(arr: np.ndarray, itemsize: int) -> int:
    """The bytes a contiguous copy of ``arr``'s elements (``itemsize`` each) takes."""
    return math.prod(arr.shape) * itemsize


def decoded(arr: np.ndarray, name: str, itemsize: int) -> None:
    """Refuse an operand whose contiguous bits (``itemsize`` a element) would not fit in memory,
    where decoding copies it (a strided or broadcast view, or another dtype)."""
    if arr.flags.c_contiguous and arr.dtype.itemsize == itemsize:
        return
    shape = " x ".join(map(str, arr.shape))
    require_memory(copy_bytes(arr, itemsize), name, f"a contiguous copy of its {shape} elements (it is a "
                   f"{'broadcast or strided view' if not arr.flags.c_contiguous else 'different dtype'})",
                   "pass a smaller array, or a contiguous one of the operand's dtype")


def output_array(arr, name: str, dtype, *, what: str) -> np.ndarray:
    """``arr`` checked to be an array the call can write in place: a numpy array of ``dtype``,
    writable, whose elements are distinct memory (no broadcast or self-overlapping view)."""
    dtype = np.dtype(dtype)
    if not isinstance(arr, np.ndarray):
        raise OperandError(f"{name} must be a writable numpy array of {dtype} ({what} in place), got "
                           f"{type(arr).__name__}")
    if arr.dtype != dtype:
        raise OperandError(f"{name} must be a numpy array of {dtype} ({what} in place), got dtype {arr.dtype}")
    if not arr.flags.writeable:
        raise OperandError(f"{name} must be writable ({what} in place), got a read-only array")
    if any(s == 0 and n > 1 for s, n in zip(arr.strides, arr.shape)):
        raise OperandError(f"{name} is a view whose elements share memory (a zero stride), but {what} in place: "
                           f"pass an array of distinct elements")
    return arr


@contextlib.contextmanager
def writeback(arr: np.ndarray):
    """A 1-D view of ``arr``'s elements in C order to write; where ``arr`` is not contiguous,
    a copy whose contents go back into ``arr`` on leaving, so the writes land in the caller's
    array either way (:func:`output_array` checked)."""
    if arr.flags.c_contiguous:
        yield arr.reshape(-1)
        return
    flat = arr.reshape(-1)  # a copy: numpy cannot flatten a strided view in place
    yield flat
    arr[...] = flat.reshape(arr.shape)


def _npy_header(f, size: int, what: str, error) -> None:
    """Check the ``.npy`` header at the start of ``f`` (``size`` bytes in all): a plain dtype
    and a shape whose bytes the member holds and this process can allocate."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(f)
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = read(f)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise error(f"{what}: not a .npy array ({excerpt(str(exc), 80)})") from None
    if dtype.hasobject:
        raise error(f"{what}: holds Python objects (dtype {excerpt(str(dtype), 40)}); only plain "
                    f"numeric arrays are read")
    claimed = math.prod(shape) * dtype.itemsize
    held = size - f.tell()
    if claimed > held:
        raise error(f"{what}: its header claims shape {excerpt(shape, 50)} of {dtype} "
                    f"({claimed} bytes), but the file holds {held} bytes of data")
    require_memory(claimed, f"{what}", f"its shape {excerpt(shape, 50)} of {dtype}")


def read_npy(path, name: str, error=OperandError) -> np.ndarray:
    """The array of a ``.npy`` file, its header checked first (:func:`_npy_header`), so that a
    damaged or hostile header is an ``error`` naming ``name``, never a huge allocation."""
    try:
        with open(path, "rb") as f:
            _npy_header(f, os.fstat(f.fileno()).st_size, name, error)
        array = np.load(path, allow_pickle=False)
    except FastmmaError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise error(f"{name}: cannot read {excerpt(str(path), 80)} as a .npy array ({excerpt(str(exc), 80)})") from None
    if not isinstance(array, np.ndarray):
        raise error(f"{name}: {excerpt(str(path), 80)} is a .npz archive; give one .npy array")
    return array


def read_npz(path, name: str, error=OperandError) -> dict:
    """Every array of a ``.npz`` file by key, each member's header checked before any is
    loaded (:func:`_npy_header`); a damaged file is an ``error`` naming ``name`` and the key."""
    import zipfile
    import zlib

    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if m.filename.endswith(".npy")]
            for member in members:
                with archive.open(member) as f:
                    _npy_header(f, member.file_size, f"array {excerpt(member.filename[:-4], 40)}", error)
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except FastmmaError:
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise error(f"{name}: cannot read {excerpt(str(path), 80)} as a .npz of arrays "
                    f"({type(exc).__name__}: {excerpt(str(exc), 80)})") from None
