"""Where ``mma.sp``'s metadata lives, and what it says (PTX ISA 9.7.14.6.1-2).

A structured-sparse row of A keeps half its elements.  The row is cut into chunks (4 dense
elements for 2:4 sparsity, 2 for ``.tf32``'s 1:2, 8 for ``.s4``/``.u4``'s pair-wise 4:8), and a
4-bit metadata nibble per chunk holds two 2-bit indices: bits 0-1 the place of the chunk's
first kept element, bits 2-3 the second's (``.s4``/``.u4``: of its first and second kept pair;
``.tf32``: ``0b0100`` keeps element 0, ``0b1110`` element 1).  The compressed row holds the
kept elements in order, two per chunk (one for ``.tf32``, four for ``.s4``/``.u4``).

The ISA draws which lane's metadata register holds which nibble as figures only; the
recordings in tests/golden/probes/q15_mma_sp (layout cases, every selector) give them.  With
``g = lane >> 2`` (rows ``g`` and ``g + 8``, ``h`` 0 or 1 for the two) and chunk ``q`` of a row,
the nibble lives in lane ``4 g + t`` at nibble ``s`` (bits ``4 s .. 4 s + 3``):

* 16- and 32-bit types (``.f16``, ``.bf16``, ``.tf32``; 4 chunks a thread):
  ``t = base + q // 4``, ``s = 4 h + q % 4``;
* 8- and 4-bit types (``.s8``, ``.u8``, ``.e4m3``, ``.e5m2``, ``.s4``, ``.u4``; 8 chunks a thread):
  ``t = base + h + 2 (q // 8)``, ``s = q % 8``;

where ``base`` is the sparsity selector times the threads it names: one thread of each four
where a quad's metadata fills one register, a pair (selector 0: threads 0 and 1, 1: 2 and 3)
where it fills two, all four (selector 0) where it fills four.  Other lanes' metadata are not
read.

``wgmma.mma_async.sp`` (PTX ISA 9.7.15.6) follows the same map warp by warp: warp ``w`` of the
warpgroup holds rows ``16 w .. 16 w + 15`` as one ``mma.sp`` of ``m16n8kK`` holds its rows
(:func:`warpgroup_kept_columns`; recorded in tests/golden/probes/q16_wgmma_sp).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import OperandError
from ..isa import tables
from .mma_fragments import shape_dims

WARP_SIZE = 32
WARPS = 4  #: warps of a warpgroup
WGMMA_SP = "wgmma.sp"  #: the key of wgmma.mma_async.sp's nibbles in ``tables.MMA_SP_TYPE_ROWS``


def _row(atype: str) -> tables.MmaSpTypeRow:
    row = next((r for r in tables.MMA_SP_TYPE_ROWS if atype in r.atypes), None)
    if row is None:
        raise OperandError(f"mma.sp .atype must be one of "
                           f"{', '.join('.' + t for r in tables.MMA_SP_TYPE_ROWS for t in r.atypes)}, got {atype!r}")
    return row


@lru_cache(maxsize=None)
def metadata_slots(atype: str, shape: str, selector: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lane, nibble)``, each ``int64[M, K/chunk]``: where the metadata of chunk ``q`` of
    row ``i`` of A lives (module docstring)."""
    row = _row(atype)
    if shape not in row.shapes:
        raise OperandError(f"shape .{shape} is not an mma.sp shape of {row.name}; valid: "
                           f"{', '.join('.' + s for s in row.shapes)}")
    if selector not in row.selectors[shape]:
        raise OperandError(f"sparsity selector of {row.name} mma.sp .{shape} must be one of "
                           f"{', '.join(map(str, row.selectors[shape]))}, got {selector!r}")
    m, _, k = shape_dims(shape)
    chunks = k // row.chunk
    i = np.arange(m)[:, None]
    q = np.arange(chunks)[None, :]
    g, h = i % 8, i // 8
    wide = tables.MMA_ELEM_BITS[atype] >= 16
    threads = chunks // 4  # registers a quad's metadata fills: 2 rows x chunks x 4 bits
    base = selector * threads
    if wide:
        t, s = base + q // 4, 4 * h + q % 4
    else:
        t, s = base + h + 2 * (q // 8), q % 8
    lane, nibble = np.broadcast_to(4 * g + t, (m, chunks)).copy(), np.broadcast_to(s, (m, chunks)).copy()
    lane.setflags(write=False)
    nibble.setflags(write=False)
    return lane, nibble


@lru_cache(maxsize=None)
def _nibble_tables(atype: str, spvariant: str) -> tuple[np.ndarray, np.ndarray]:
    """For each of the 16 nibble values: whether the ISA gives it a meaning for ``atype`` and
    ``spvariant``, and the kept places within the chunk it names."""
    row = _row(atype)
    meaningful = np.zeros(16, bool)
    meaningful[list(row.nibbles[spvariant])] = True
    v = np.arange(16)
    first, second = v & 3, v >> 2
    if row.chunk == 2:  # .tf32: one of two
        places = (v == 0xE)[:, None].astype(np.int64)
    elif row.chunk == 8:  # pairs of .s4/.u4
        places = np.stack([2 * first, 2 * first + 1, 2 * second, 2 * second + 1], axis=-1)
    else:
        places = np.stack([first, second], axis=-1)
    return meaningful, places


def _refuse_undefined(values: np.ndarray, atype: str, spvariant: str, lane: np.ndarray, nib: np.ndarray) -> None:
    """:class:`~fastmma.errors.OperandError`, naming the first, where a nibble of ``values``
    (``[..., M, chunks]``, held at ``lane`` / ``nib``) has no meaning in the ISA for ``atype``
    and ``spvariant``."""
    row = _row(atype)
    bad = ~_nibble_tables(atype, spvariant)[0][values]
    if bad.any():
        where = np.argwhere(bad)[0]
        *stack, i, q = (int(x) for x in where)
        what = "wgmma.mma_async.sp" if spvariant == WGMMA_SP else f"mma.{spvariant}"
        raise OperandError(
            f"{what} metadata: row {i}, chunk {q} (lane {int(lane[i, q])}, bits {4 * int(nib[i, q])}-"
            f"{4 * int(nib[i, q]) + 3}{f', warp {tuple(stack)}' if stack else ''}) holds "
            f"0b{int(values[tuple(where)]):04b}, which the ISA leaves undefined for {row.name} {what}; "
            f"meaningful values: {', '.join(f'0b{v:04b}' for v in row.nibbles[spvariant])}")


def kept_columns(e_regs: np.ndarray, atype: str, shape: str, selector: int, spvariant: str) -> np.ndarray:
    """The dense column of each kept element of A, ``int64[..., M, K/2]``, from the metadata
    registers ``e_regs`` (``uint32[..., 32]``, one register a lane) of a stack of warps.

    Raises :class:`~fastmma.errors.OperandError` where a nibble that is read holds an index
    pair the ISA gives no meaning (undefined behaviour: two equal indices; for
    ``::ordered_metadata``, and for fp8 in either variant, indices not increasing; for
    ``.tf32``, anything but ``0b0100`` and ``0b1110``)."""
    lane, nib = metadata_slots(atype, shape, selector)
    e = np.asarray(e_regs, np.uint32)
    values = ((e[..., lane] >> (4 * nib).astype(np.uint32)) & np.uint32(0xF)).astype(np.intp)
    _refuse_undefined(values, atype, spvariant, lane, nib)
    places = _nibble_tables(atype, spvariant)[1]
    out = places[values] + _row(atype).chunk * np.arange(values.shape[-1])[:, None]
    return out.reshape(values.shape[:-1] + (-1,))


def chunk_nibbles(columns: np.ndarray, atype: str, shape: str) -> np.ndarray:
    """The metadata nibble of each chunk, ``int[..., M, K/chunk]``, that keeps A's elements at
    ``columns`` (``int[..., M, K/2]``, as :func:`kept_columns` returns them); an
    :class:`~fastmma.errors.OperandError` where they do not keep, in each chunk, places of its
    own (two different ones; one for ``.tf32``; aligned pairs for ``.s4``/``.u4``)."""
    cols = np.asarray(columns, np.int64)
    m, _, k = shape_dims(shape)
    if cols.shape[-2:] != (m, k // 2):
        raise OperandError(f"columns must be int[..., {m}, {k // 2}] for mma.sp .{shape}, got shape {cols.shape}")
    return _nibbles(cols, _row(atype))


def chunk_geometry(atype: str) -> tuple[int, int]:
    """``(chunk, kept)``: the dense elements one metadata nibble covers for ``atype`` and how
    many of them a row keeps (4 and 2; 2 and 1 for ``.tf32``; 8 and 4 for ``.s4``/``.u4``)."""
    chunk = _row(atype).chunk
    return chunk, _KEPT[chunk]


_KEPT = {2: 1, 4: 2, 8: 4}  #: kept elements of a chunk, by its size


def _nibbles(cols: np.ndarray, row: tables.MmaSpTypeRow) -> np.ndarray:
    """:func:`chunk_nibbles` of ``cols`` (``int64[..., M, kept * chunks]``, any number of
    chunks); the error names the first row and chunk that keeps no places of its own."""
    per = _KEPT[row.chunk]
    chunk = cols.reshape(cols.shape[:-1] + (cols.shape[-1] // per, per))
    local = chunk - row.chunk * np.arange(chunk.shape[-2])[:, None]
    outside = ((local < 0) | (local >= row.chunk)).any(axis=-1)
    if row.chunk == 2:
        _refuse_places(outside, chunk, row, "keeps column 2q or 2q + 1 of a .tf32 chunk q of 2")
        return np.where(local[..., 0] == 1, 0xE, 0x4)
    if row.chunk == 8:
        _refuse_places(outside | (local[..., 1::2] != local[..., 0::2] + 1).any(axis=-1)
                       | (local[..., 0::2] % 2 != 0).any(axis=-1), chunk, row,
                       "keeps aligned pairs (2p, 2p + 1) of its .s4/.u4 chunk of 8")
        local = local[..., 0::2] // 2
    _refuse_places(outside | (local[..., 0] == local[..., 1]), chunk, row,
                   "keeps two different places 0..3 of its own chunk")
    return local[..., 0] | (local[..., 1] << 2)


def _refuse_places(bad: np.ndarray, by_chunk: np.ndarray, row: tables.MmaSpTypeRow, rule: str) -> None:
    """:class:`~fastmma.errors.OperandError` naming the first row and chunk where ``bad``
    (``[..., M, chunks]``) holds, with the dense columns it keeps (``by_chunk``:
    ``[..., M, chunks, kept]``) and the ``rule`` it breaks."""
    if bad.any():
        *stack, i, q = (int(x) for x in np.argwhere(bad)[0])
        kept = tuple(int(x) for x in by_chunk[(*stack, i, q)])
        where = f", stack index {tuple(stack)}" if stack else ""
        first = row.chunk * q
        raise OperandError(f"columns: row {i}, chunk {q} (dense columns {first}..{first + row.chunk - 1}{where}) keeps "
                           f"columns {kept}; each row {rule}")


def check_columns(columns: np.ndarray, atype: str, shape: str, spvariant: str) -> None:
    """``columns`` (as :func:`kept_columns` returns them) checked to be ones the metadata of
    ``spvariant`` can name, without building the registers."""
    lane, nib = metadata_slots(atype, shape, 0)
    _refuse_undefined(chunk_nibbles(columns, atype, shape), atype, spvariant, lane, nib)


def check_row_columns(columns: np.ndarray, atype: str, spvariant: str) -> None:
    """A whole sparse A's ``columns`` (``int[..., M, K/2]``, each row's dense column of each kept
    element, for any K of whole chunks) checked chunk by chunk, as a GEMM's k-loop of
    instructions will read them: places of the chunk's own, that ``spvariant``'s metadata
    (``"sp"``, ``"sp::ordered_metadata"`` or ``"wgmma.sp"``) can name; the error names the row
    and the chunk."""
    row = _row(atype)
    cols = np.asarray(columns, np.int64)
    if cols.shape[-1] == 0:  # K = 0: no chunk
        return
    values = _nibbles(cols, row)
    meaningful, places = _nibble_tables(atype, spvariant)
    bad = ~meaningful[values]
    if bad.any():
        what = "wgmma.mma_async.sp" if spvariant == WGMMA_SP else f"mma.{spvariant}"
        _refuse_places(bad, cols.reshape(values.shape + (_KEPT[row.chunk],)), row,
                       f"of {row.name} {what} keeps its places in an order the metadata can name "
                       f"({_orders(meaningful, places)})")


def _orders(meaningful: np.ndarray, places: np.ndarray) -> str:
    """The kept places that the meaningful nibbles name, as text."""
    return ", ".join(str(tuple(int(x) for x in places[v])) for v in np.flatnonzero(meaningful))


def compress(dense, atype: str) -> tuple[np.ndarray, np.ndarray]:
    """``(values, columns)``: a pruned dense A (``[..., M, K]``, K a whole number of chunks)
    as the sparse instructions and :func:`fastmma.matmul_sp` take it, each row's kept elements
    in order and the dense column of each (``int64[..., M, K/2]``).  In each chunk the kept
    places are its non-zero elements (``.s4``/``.u4``: its aligned pairs that hold one), and
    where it has fewer, the zeros at its first free places, all in increasing order (which every
    variant's metadata can name).  A kept zero is a term of the sum: it takes part in the
    alignment as zero terms do, and facing an infinity gives NaN; pass columns of your own where
    that choice matters.  A chunk with more non-zero elements than it keeps is an
    :class:`~fastmma.errors.OperandError` naming it."""
    from ..formats import as_numpy, get_format, to_bits

    fmt = get_format(atype)
    arr = as_numpy(dense, "dense")
    bits = to_bits(arr, fmt, "dense").astype(np.int64) >> fmt.ignored_low_bits  # tf32: a float32's top 19 bits
    chunk, kept = chunk_geometry(atype)
    if bits.ndim < 2 or bits.shape[-1] % chunk:
        raise OperandError(f"dense must be a matrix (..., M, K) with K a multiple of {atype}'s chunk of {chunk}, "
                           f"got shape {arr.shape}")
    nonzero = (bits & ((1 << (fmt.bits - fmt.ignored_low_bits - 1)) - 1)) != 0 if fmt.is_float else bits != 0
    unit = 2 if chunk == 8 else 1  # .s4/.u4 keep pairs
    units = nonzero.reshape(nonzero.shape[:-1] + (-1, chunk // unit, unit)).any(axis=-1)
    need = kept // unit
    full = units.sum(axis=-1) > need
    if full.any():
        *stack, i, q = (int(x) for x in np.argwhere(full)[0])
        where = f", stack index {tuple(stack)}" if stack else ""
        raise OperandError(f"dense: row {i}, chunk {q} (columns {chunk * q}..{chunk * q + chunk - 1}{where}) holds "
                           f"{int(units[(*stack, i, q)].sum()) * unit} non-zero elements; {atype} keeps {kept} of "
                           f"each {chunk}{' in aligned pairs' if unit == 2 else ''}")
    order = np.argsort(~units, axis=-1, kind="stable")[..., :need]  # non-zero places first, then free ones
    places = np.sort(order, axis=-1)[..., None] * unit + np.arange(unit)
    cols = (places.reshape(places.shape[:-3] + (places.shape[-3], -1))
            + chunk * np.arange(places.shape[-3])[:, None]).reshape(bits.shape[:-1] + (-1,))
    return np.take_along_axis(arr, cols, axis=-1), cols


def encode_metadata(columns: np.ndarray, atype: str, shape: str, selector: int = 0) -> np.ndarray:
    """The metadata registers ``uint32[..., 32]`` that keep A's elements at ``columns``
    (``int[..., M, K/2]``, as :func:`kept_columns` returns them; increasing within each
    chunk for ``::ordered_metadata``), the lanes the selector does not name holding 0."""
    lane, nib = metadata_slots(atype, shape, selector)
    values = chunk_nibbles(columns, atype, shape).astype(np.int64) << (4 * nib)
    to_lane = np.zeros((lane.size, WARP_SIZE), np.int64)  # each (lane, nibble) slot holds one chunk:
    to_lane[np.arange(lane.size), lane.ravel()] = 1          # a lane's sum of its shifted nibbles is their OR
    e = values.reshape(values.shape[:-2] + (-1,)) @ to_lane
    return e.astype(np.uint32)


def warpgroup_kept_columns(e_regs: np.ndarray, atype: str, metadata_shape: str, selector: int) -> np.ndarray:
    """``wgmma.mma_async.sp`` (PTX ISA 9.7.15.6): the dense column of each kept element of A,
    ``int64[..., 64, K/2]``, from the metadata registers ``e_regs`` (``uint32[..., 128]``, one a
    thread) of a stack of warpgroups.  Warp ``w`` (threads ``32 w .. 32 w + 31``) holds the
    metadata of rows ``16 w .. 16 w + 15`` exactly as one ``mma.sp`` of ``metadata_shape``
    (``m16n8k{K}``) holds its 16 rows' (recorded for every selector and type,
    tests/golden/probes/q16_wgmma_sp); any two different indices are meaningful for every type
    but ``.tf32``."""
    e = np.asarray(e_regs, np.uint32)
    kept = kept_columns(e.reshape(e.shape[:-1] + (WARPS, WARP_SIZE)), atype, metadata_shape, selector, WGMMA_SP)
    return kept.reshape(e.shape[:-1] + (WARPS * kept.shape[-2], kept.shape[-1]))


def _per_warp(columns: np.ndarray) -> np.ndarray:
    """A warpgroup's ``columns`` (``[..., 64, K/2]``) as its warps' (``[..., 4, 16, K/2]``)."""
    cols = np.asarray(columns)
    if cols.ndim < 2 or cols.shape[-2] != WARPS * 16:
        raise OperandError(f"columns must be int[..., 64, K/2] for wgmma.mma_async.sp, got shape {cols.shape}")
    return cols.reshape(cols.shape[:-2] + (WARPS, 16, cols.shape[-1]))


def encode_warpgroup_metadata(columns: np.ndarray, atype: str, metadata_shape: str, selector: int = 0) -> np.ndarray:
    """The metadata registers ``uint32[..., 128]`` of a warpgroup that keep A's elements at
    ``columns`` (``int[..., 64, K/2]``, as :func:`warpgroup_kept_columns` returns them)."""
    per_warp = _per_warp(columns)
    return encode_metadata(per_warp, atype, metadata_shape, selector).reshape(per_warp.shape[:-3] + (WARPS * WARP_SIZE,))


def check_warpgroup_columns(columns: np.ndarray, atype: str, metadata_shape: str) -> None:
    """:func:`check_columns` for a warpgroup's ``columns`` (``int[..., 64, K/2]``), each warp's
    16 rows as one ``mma.sp``'s, with wgmma.mma_async.sp's meaningful nibbles."""
    check_columns(_per_warp(columns), atype, metadata_shape, WGMMA_SP)
