"""fastmma.ptx ``ld`` and ``st``: per-thread loads and stores in global and shared memory.

Expected values come from numpy's reading of the memory images and from
:func:`fastmma.wgmma.mma_async` (checked against the H100 recordings elsewhere), never from
the interpreter: a snippet that writes a wgmma's tiles into shared memory with ``st.shared``
must compute what ``mma_async`` computes on an image holding those bytes, and only after
``fence.proxy.async`` (PTX ISA 9.7.15.4), which strict mode enforces.
"""

import numpy as np
import pytest

from fastmma import ptx, wgmma
from fastmma.errors import AlignmentError, HazardError, InvalidInstructionError, MemoryBoundsError, \
    UnsupportedInstructionError
from test_ptx import COMPLETE, DESC_A, DESC_B, SMEM_BYTES, gather, names, smem_image

FILL = """\
.reg .b32 a<4>, b<4>;
.reg .u32 off, tid;
.reg .pred p, low;
.reg .f32 d<4>;
.reg .b64 descA, descB;
mov.u32 tid, %tid.x;
st.shared.v4.b32 [off], {a0, a1, a2, a3};            // A: 2 KiB from address 0, 16 bytes a thread
setp.lt.u32 low, tid, 16;
@low st.shared.v4.b32 [off+16384], {b0, b1, b2, b3};  // B: 256 bytes from 16384, threads 0-15
"""
MMA = """\
wgmma.fence.sync.aligned;
setp.ne.b32 p, 0, 0;
wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, descA, descB, p, 1, 1, 0, 0;
"""


def _tiles():
    """The image the snippet's stores make, and the registers that make it."""
    source = smem_image(7)
    image = np.zeros(SMEM_BYTES, np.uint8)
    image[:2048], image[16384:16640] = source[:2048], source[16384:16640]
    words = source[:2048].view(np.uint32).reshape(128, 4)
    b_words = np.zeros((128, 4), np.uint32)
    b_words[:16] = source[16384:16640].view(np.uint32).reshape(16, 4)
    regs = {"off": np.arange(128, dtype=np.uint32) * 16, "descA": np.uint64(DESC_A), "descB": np.uint64(DESC_B)}
    regs.update({f"a{j}": words[:, j] for j in range(4)})
    regs.update({f"b{j}": b_words[:, j] for j in range(4)})
    return image, regs


def test_tiles_stored_by_the_threads_then_fenced_are_what_wgmma_reads():
    image, regs = _tiles()
    m = ptx.run(FILL + "fence.proxy.async.shared::cta;\n" + MMA + COMPLETE, regs, smem=np.zeros(SMEM_BYTES, np.uint8))
    assert (m.smem == image).all()
    expected = wgmma.mma_async("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, descA, descB, "
                               "p, 1, 1, 0, 0;", np.zeros((128, 4), np.uint32), a_desc=DESC_A, b_desc=DESC_B,
                               smem=image, scale_d=False)
    np.testing.assert_array_equal(gather(m, names("d", 4)), expected)


def test_tiles_stored_without_fence_proxy_async_are_a_hazard():
    image, regs = _tiles()
    with pytest.raises(HazardError, match="written with no fence.proxy.async") as info:
        ptx.run(FILL + MMA + COMPLETE, regs, smem=np.zeros(SMEM_BYTES, np.uint8))
    assert info.value.line == 12  # the mma_async


TYPES = ["b8", "u16", "s16", "b32", "u32", "s32", "f32", "b64", "u64", "s64", "f64"]


@pytest.mark.parametrize("vec", [1, 2, 4])
@pytest.mark.parametrize("typ", TYPES)
def test_per_thread_stores_then_loads_move_the_bytes_numpy_says(typ, vec):
    """Each thread stores at a place of its own (a permutation of the slots) and loads from
    another thread's; global and shared, through generic and state-space addresses."""
    size = int(typ[1:]) // 8 * vec
    rng = np.random.default_rng(size * 10 + len(typ))
    dtype = np.dtype(f"<u{int(typ[1:]) // 8}")
    values = rng.integers(0, 256, (32, size), dtype=np.uint8).view(dtype)      # [thread, vector lane]
    slots, reads = rng.permutation(32), rng.permutation(32)
    regs = {f"v{j}": values[:, j] for j in range(vec)}
    regs.update({"at": (slots * size).astype(np.uint64), "src": (reads * size).astype(np.uint64),
                 "g": (slots * size + ptx.GENERIC_SHARED_BASE + 512).astype(np.uint64)})
    v = ", ".join(names("v", vec)) if vec > 1 else "v0"
    w = ", ".join(names("w", vec)) if vec > 1 else "w0"
    vq = f".v{vec}" if vec > 1 else ""
    wrap = (lambda x: "{" + x + "}") if vec > 1 else (lambda x: x)
    m = ptx.run(f"""
        .reg .{typ} v<{vec}>, w<{vec}>, s<{vec}>;
        .reg .u64 at, src, g;
        st.global{vq}.{typ} [at+256], {wrap(v)};
        ld.global{vq}.{typ} {wrap(w)}, [src+256];
        st{vq}.{typ} [g], {wrap(v)};
        ld.shared{vq}.{typ} {wrap(', '.join(names('s', vec)) if vec > 1 else 's0')}, [src+512];
    """, regs)
    stored = np.zeros((32, size), np.uint8)
    stored[slots] = values.view(np.uint8).reshape(32, size)
    assert (m.global_mem[256:256 + 32 * size] == stored.ravel()).all()
    assert (m.smem[512:512 + 32 * size] == stored.ravel()).all()      # the generic address was shared
    expected = stored[reads].view(dtype)
    for j in range(vec):
        for name in ("w", "s"):
            assert (m.peek(f"{name}{j}").view(dtype) == expected[:, j]).all(), f"{name}{j}"


def test_a_guard_stores_and_loads_for_its_threads_only():
    m = ptx.run("""
        .reg .u32 x, y, lane;
        .reg .u64 at;
        .reg .pred odd;
        mov.u32 lane, %laneid;
        mov.u32 y, 7;
        setp.ne.u32 odd, lane, 0;
        setp.hi.u32 odd, lane, 15;
        @odd st.global.u32 [at], lane;
        @!odd ld.global.u32 y, [at+128];
    """, {"at": np.arange(32, dtype=np.uint64) * 4}, global_mem=np.full(4096, 0xFF, np.uint8))
    words = m.global_mem[:128].view(np.uint32)
    assert words.tolist() == [0xFFFFFFFF] * 16 + list(range(16, 32))
    assert m["y"].tolist() == [0xFFFFFFFF] * 16 + [7] * 16


def test_threads_storing_different_values_at_one_address():
    source = ".reg .u32 lane;\nmov.u32 lane, %laneid;\nst.global.u32 [8], lane;\n"
    with pytest.raises(HazardError, match="threads 0 and 1 store different bytes at global byte 8") as info:
        ptx.run(source)
    assert info.value.line == 3
    m = ptx.run(source, strict=False)
    assert m.global_mem[8:12].view(np.uint32)[0] == 31       # the highest thread's
    m = ptx.run(".reg .u32 x;\nmov.u32 x, 5;\nst.global.u32 [8], x;\n")  # the same bytes: no conflict
    assert m.global_mem[8:12].view(np.uint32)[0] == 5


def test_a_conflict_in_one_space_leaves_the_other_unwritten():
    """Generic addresses: threads 0-15 store into shared memory, 16-31 all at one global word;
    the conflict is found before any thread's bytes are written."""
    lane = np.arange(32, dtype=np.uint64)
    address = np.where(lane < 16, ptx.GENERIC_SHARED_BASE + 4 * lane, 64).astype(np.uint64)
    with pytest.raises(HazardError, match="threads 16 and 17 store different bytes at global byte 64") as info:
        ptx.run(".reg .u32 lane;\n.reg .u64 a;\nmov.u32 lane, %laneid;\nst.u32 [a], lane;\n", {"a": address})
    assert not info.value.machine.smem[:64].any()


@pytest.mark.parametrize("source,registers,error,line,column,needle", [
    (".reg .u32 x;\n.reg .u64 a;\nld.global.u32 x, [a];", {"a": np.arange(32, dtype=np.uint64) * 4 + 2},
     AlignmentError, 3, 1, r"thread 0's address 0x2 is not a multiple of the access size, 4 bytes"),
    (".reg .b32 x<2>;\n.reg .u64 a;\nst.shared.v2.b32 [a], {x0, x1};", {"a": np.where(np.arange(32) == 9, 4, 0)
                                                                          .astype(np.uint64)},
     AlignmentError, 3, 1, r"thread 9's address 0x4 is not a multiple of the access size, 8 bytes"),
    (".reg .u32 x;\n.reg .u64 a;\nld.global.u32 x, [a];", {"a": np.where(np.arange(32) == 5, 1 << 20, 0)
                                                         .astype(np.uint64)},
     MemoryBoundsError, 3, 1, r"thread 5's address 0x100000 reads or writes global bytes \[1048576, 1048580\)"),
    (".reg .u32 x;\nst.shared.u32 [-4], x;", {}, MemoryBoundsError, 2, 1, r"shared bytes \[-4, 0\)"),
    ("st.global.u32 [0], %tid.x;", {}, InvalidInstructionError, 1, 20, "cannot be used here"),
    (".reg .f32 x;\nst.global.u32 [0], x;", {}, InvalidInstructionError, 2, 20, "x is .f32, which does not agree"),
    (".reg .u32 x;\nld.global.nc.u32 x, [0];", {}, UnsupportedInstructionError, 2, 1, r"\.nc is not supported"),
    (".reg .u32 x;\nld.volatile.global.u32 x, [0];", {}, UnsupportedInstructionError, 2, 1, r"\.volatile is not"),
    (".reg .u32 x;\nld.global.b128 x, [0];", {}, InvalidInstructionError, 2, 1, "type qualifier must be one of"),
    (".reg .u64 x;\nld.global.u32 x, [0];", {}, InvalidInstructionError, 2, 15, "does not agree with .u32"),
    (".reg .u32 x;\nld.global.v2.u32 x, [0];", {}, InvalidInstructionError, 2, 18, "a vector of 2 registers"),
    (".reg .u32 x<4>;\nld.global.u32 {x0, x1}, [0];", {}, InvalidInstructionError, 2, 15, "one register"),
    ("st.global.u32 [0], 5;", {}, InvalidInstructionError, 1, 20, "the value st stores must be a register"),
    (".reg .u32 x;\nld.global.u32 x, x;", {}, InvalidInstructionError, 2, 18, r"expected an address \[p\]"),
])
def test_bad_loads_and_stores_name_the_thread_and_position(source, registers, error, line, column, needle):
    with pytest.raises(error, match=needle) as info:
        ptx.run(source, registers)
    assert (info.value.line, info.value.column) == (line, column)
