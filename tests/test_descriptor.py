"""Matrix descriptors and shared-memory address maps (PTX ISA 9.7.15.5.1.2).

Expected addresses are worked out by hand from the ISA rule, in the comments next to them:
canonical offset first ("pre"), then the swizzle XOR of address bits 4.. with
``((address >> 7) - base_offset) & (W/16 - 1)``.
"""

import numpy as np
import pytest

from fastmma.errors import AlignmentError, InvalidInstructionError, OperandError, SharedMemoryBoundsError
from fastmma.layout.descriptor import (
    MatrixDescriptor,
    element_addresses,
    gather_operand,
    major_from_trans,
    SWIZZLE_BYTES,
    operand_footprint,
    swizzle_address,
)


def addr(desc, mn, k, bits, major, i, j, **kw):
    byte, bit = element_addresses(desc, mn, k, bits, major, **kw)
    return int(byte[i, j]), int(bit[i, j])


# (descriptor, mn, k, bits, major, [((i, j), byte, bit), ...])
HAND_CASES = {
    "K none f16": (
        MatrixDescriptor(256, leading_byte_offset=128, stride_byte_offset=256),
        64, 16, 16, "K",
        [
            ((0, 0), 256, 0),
            ((1, 0), 272, 0),   # row 1 -> +16
            ((7, 7), 382, 0),   # 256 + 7*16 + 7*2
            ((0, 8), 384, 0),   # second 16-byte chunk of K -> +LBO
            ((9, 9), 658, 0),   # 256 + 16 + SBO 256 + LBO 128 + 2
            ((63, 15), 2302, 0),  # 256 + 7*16 + 7*256 + 128 + 7*2
        ],
    ),
    "K 128B e4m3": (
        MatrixDescriptor(1024, 16, 1024, 0, "128B"),
        64, 32, 8, "K",
        [
            ((0, 0), 1024, 0),
            ((1, 0), 1168, 0),   # pre 1152, phase 9&7=1 -> ^16
            ((1, 17), 1153, 0),  # pre 1169, phase 1 -> ^16
            ((5, 31), 1743, 0),  # pre 1695 = 1664+31, phase 5: bits4-6 001^101=100 -> 1664+79
            ((8, 0), 2048, 0),   # SBO, phase 16&7=0
            ((15, 3), 3059, 0),  # pre 2947 = 2944+3, phase 23&7=7 -> 2944+115
        ],
    ),
    "K 64B s8": (
        MatrixDescriptor(0, 16, 512, 0, "64B"),
        64, 32, 8, "K",
        [
            ((1, 0), 64, 0),     # pre 64, phase 0
            ((2, 0), 144, 0),    # pre 128, phase 1
            ((3, 20), 196, 0),   # pre 212, phase 1 -> ^16
            ((7, 31), 495, 0),   # pre 479 = 384+95, phase 3: bits4-5 01^11=10 -> 384+111
            ((8, 0), 512, 0),    # pre 512, phase 4&3=0
        ],
    ),
    "K 32B tf32": (
        MatrixDescriptor(0, 16, 256, 0, "32B"),
        64, 8, 32, "K",
        [
            ((1, 1), 36, 0),     # pre 32+4, phase 0
            ((4, 0), 144, 0),    # pre 128, phase 1
            ((4, 5), 132, 0),    # pre 148, phase 1 -> ^16
            ((8, 7), 284, 0),    # pre 256+28, phase 2&1=0
            ((13, 2), 440, 0),   # pre 256+160+8=424, phase 3&1=1 -> ^16
        ],
    ),
    "MN none f16": (
        MatrixDescriptor(0, leading_byte_offset=1024, stride_byte_offset=128),
        64, 16, 16, "MN",
        [
            ((1, 0), 2, 0),
            ((7, 0), 14, 0),
            ((0, 1), 16, 0),     # next K row of the core matrix
            ((8, 0), 128, 0),    # next 8 M -> SBO
            ((0, 8), 1024, 0),   # next 8 K -> LBO
            ((13, 10), 1194, 0),  # 10 + 128 + 32 + 1024
        ],
    ),
    "MN 128B f16": (
        MatrixDescriptor(0, leading_byte_offset=2048, stride_byte_offset=1024, swizzle="128B"),
        128, 16, 16, "MN",
        [
            ((9, 0), 18, 0),     # 2 + 16, phase 0
            ((0, 1), 144, 0),    # pre 128, phase 1
            ((9, 1), 130, 0),    # pre 146, phase 1 -> ^16
            ((63, 7), 910, 0),   # pre 1022 = 896+126, phase 7: bits4-6 111^111 -> 896+14
            ((64, 0), 2048, 0),  # next 64 M -> LBO
            ((0, 8), 1024, 0),   # next 8 K -> SBO
            ((70, 12), 3660, 0),  # pre 2048+1024+512+12=3596, phase 28&7=4 -> +64
        ],
    ),
    "MN 64B bf16": (
        MatrixDescriptor(512, leading_byte_offset=512, stride_byte_offset=2048, swizzle="64B"),
        64, 16, 16, "MN",
        [
            ((0, 0), 512, 0),
            ((8, 1), 592, 0),    # pre 512+16+64, phase 4&3=0
            ((8, 2), 640, 0),    # pre 656, phase 5&3=1 -> ^16
            ((33, 3), 1234, 0),  # pre 512+512+192+2=1218, phase 9&3=1 -> ^16
            ((31, 15), 3022, 0),  # pre 3070 = 2944+126, phase 23&3=3: bits4-5 11^11 -> 2944+78
        ],
    ),
    "MN 32B f16": (
        MatrixDescriptor(0, leading_byte_offset=256, stride_byte_offset=512, swizzle="32B"),
        32, 16, 16, "MN",
        [
            ((8, 0), 16, 0),
            ((8, 4), 128, 0),    # pre 144, phase 1 -> ^16
            ((17, 5), 434, 0),   # pre 2+256+160=418, phase 3&1=1 -> ^16
            ((0, 8), 512, 0),
        ],
    ),
    "K none b1": (
        MatrixDescriptor(0, leading_byte_offset=128, stride_byte_offset=256),
        16, 256, 1, "K",
        [
            ((0, 0), 0, 0),
            ((0, 9), 1, 1),
            ((0, 127), 15, 7),
            ((0, 128), 128, 0),  # second 128-bit chunk -> LBO
            ((1, 130), 144, 2),  # 16 + 128, bit 2
            ((9, 255), 415, 7),  # 16 + 256 + 128 + 15, bit 7
        ],
    ),
    "K 128B b1": (
        MatrixDescriptor(0, 16, 1024, 0, "128B"),
        8, 256, 1, "K",
        [
            ((1, 0), 144, 0),    # pre 128, phase 1
            ((2, 200), 313, 0),  # pre 256+25=281, phase 2: bits4-6 001^010=011 -> 256+57
            ((2, 203), 313, 3),
        ],
    ),
    "K 128B base_offset 5": (
        MatrixDescriptor(0, 16, 1024, 5, "128B"),
        8, 16, 16, "K",
        [
            ((0, 0), 48, 0),     # phase (0-5)&7 = 3
            ((1, 0), 192, 0),    # pre 128, phase (1-5)&7 = 4 -> ^64
        ],
    ),
    "K 32B base_offset 2": (
        MatrixDescriptor(128, 16, 256, 2, "32B"),
        8, 16, 16, "K",
        [
            ((0, 0), 144, 0),    # pre 128, phase (1-2)&1 = 1
            ((4, 0), 256, 0),    # pre 256, phase (2-2)&1 = 0
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(HAND_CASES))
def test_hand_built_addresses(name):
    desc, mn, k, bits, major, cases = HAND_CASES[name]
    for (i, j), byte, bit in cases:
        assert addr(desc, mn, k, bits, major, i, j) == (byte, bit), (name, i, j)


def test_descriptor_value_accepted_as_int():
    desc, mn, k, bits, major, cases = HAND_CASES["K 128B e4m3"]
    for (i, j), byte, bit in cases:
        assert addr(desc.encode(), mn, k, bits, major, i, j) == (byte, bit)


def test_image_address_enters_the_swizzle():
    d = MatrixDescriptor(0, 16, 1024, 0, "128B")
    # image byte 0 at shared address 128: element (0,0) is at absolute 128, phase 1 -> 144
    assert addr(d, 8, 16, 16, "K", 0, 0, image_address=128) == (16, 0)
    # a 1024-aligned image behaves as image_address 0
    b0, _ = element_addresses(d, 64, 16, 16, "K")
    b1, _ = element_addresses(d, 64, 16, 16, "K", image_address=3 * 1024)
    assert np.array_equal(b0, b1)
    with pytest.raises(AlignmentError):
        element_addresses(d, 64, 16, 16, "K", image_address=8)


def canonical(major, swizzle, start=0, base_offset=0):
    """A dense, non-overlapping descriptor for a 64 x 16 f16 operand."""
    w = {"none": 16, "32B": 32, "64B": 64, "128B": 128}[swizzle]
    if swizzle == "none":
        lbo, sbo = (128, 256) if major == "K" else (1024, 128)
    else:
        lbo, sbo = (16, 8 * w) if major == "K" else (16 * w, 8 * w)
    return MatrixDescriptor(start, lbo, sbo, base_offset, swizzle)


@pytest.mark.parametrize("swizzle,pattern", [("128B", 1024), ("64B", 512), ("32B", 256)])
@pytest.mark.parametrize("major", ["K", "MN"])
def test_base_offset_relocates_the_pattern(swizzle, pattern, major):
    """ISA: a pattern starting at P (not on its boundary) with base_offset = (P >> 7) & 7
    reads the canonical layout shifted by P."""
    ref, _ = element_addresses(canonical(major, swizzle), 64, 16, 16, major)
    for p in range(128, pattern, 128):
        moved = canonical(major, swizzle, 4096 + p, (p >> 7) & 7)
        got, _ = element_addresses(moved, 64, 16, 16, major)
        assert np.array_equal(got, ref + 4096 + p), p
        # without the base offset the same start address reads another permutation
        wrong = canonical(major, swizzle, 4096 + p, 0)
        assert not np.array_equal(element_addresses(wrong, 64, 16, 16, major)[0], ref + 4096 + p)


def test_swizzle_address_bits():
    # 128B: bits 4-6 ^= bits 7-9
    assert swizzle_address(0b1010000000, "128B") == 0b1010000000 ^ (0b101 << 4)
    # 64B: bits 4-5 ^= bits 7-8
    assert swizzle_address(0b0110000000, "64B") == 0b0110000000 ^ (0b11 << 4)
    # 32B: bit 4 ^= bit 7
    assert swizzle_address(0b0010010000, "32B") == 0b0010000000
    assert swizzle_address(12345 * 16, "none") == 12345 * 16
    assert swizzle_address(0, "128B", base_offset=1) == 0b1110000  # phase (0-1)&7 = 7


def test_every_element_has_its_own_address():
    for swizzle in ("none", "32B", "64B", "128B"):
        for major in ("K", "MN"):
            byte, _ = element_addresses(canonical(major, swizzle), 64, 16, 16, major)
            assert np.unique(byte).size == byte.size, (swizzle, major)
            if major == "MN" or swizzle in ("none", "32B"):  # K-major 64B/128B rows hold 64/128 bytes
                assert byte.min() == 0 and byte.max() == 64 * 16 * 2 - 2, (swizzle, major)


# ---- descriptor value ------------------------------------------------------------------

def test_decode_hand_value():
    # 128B (1<<62) | base 3 (3<<49) | SBO 1024 (64<<32) | LBO 16 (1<<16) | start 1024 (64)
    d = MatrixDescriptor.decode(0x4006_0040_0001_0040)
    assert d == MatrixDescriptor(start_address=1024, leading_byte_offset=16, stride_byte_offset=1024,
                                 base_offset=3, swizzle="128B")
    assert d.encode() == 0x4006_0040_0001_0040
    assert MatrixDescriptor.decode(np.uint64(3 << 62)).swizzle == "32B"
    assert MatrixDescriptor.decode(2 << 62).swizzle == "64B"


def test_decode_ignores_reserved_bits():
    v = 0x4006_0040_0001_0040
    reserved = (1 << 14) | (1 << 31) | (1 << 47) | (1 << 55)
    assert MatrixDescriptor.decode(v | reserved) == MatrixDescriptor.decode(v)


def test_encode_decode_round_trips():
    rng = np.random.default_rng(7)
    for _ in range(500):
        d = MatrixDescriptor(
            int(rng.integers(0, 1 << 14)) * 16, int(rng.integers(0, 1 << 14)) * 16,
            int(rng.integers(0, 1 << 14)) * 16, int(rng.integers(0, 8)),
            ["none", "128B", "64B", "32B"][rng.integers(0, 4)],
        )
        v = d.encode()
        assert 0 <= v < 1 << 64
        assert MatrixDescriptor.decode(v) == d
        assert MatrixDescriptor.decode(v).encode() == v


def test_str_names_fields():
    s = str(MatrixDescriptor(1024, 16, 1024, 3, "128B"))
    for part in ("start_address=0x400", "leading_byte_offset=16", "stride_byte_offset=1024",
                 "base_offset=3", "swizzle=128B"):
        assert part in s


def test_invalid_fields():
    with pytest.raises(AlignmentError, match="start_address"):
        MatrixDescriptor(8, 16, 16)
    with pytest.raises(AlignmentError, match="stride_byte_offset"):
        MatrixDescriptor(0, 16, 24)
    with pytest.raises(OperandError, match="leading_byte_offset"):
        MatrixDescriptor(0, 1 << 18, 16)
    with pytest.raises(OperandError, match="base_offset"):
        MatrixDescriptor(0, 16, 16, 8, "128B")
    with pytest.raises(OperandError, match="swizzle"):
        MatrixDescriptor(0, 16, 16, 0, "16B")
    with pytest.raises(OperandError):
        MatrixDescriptor.decode(1 << 64)
    assert major_from_trans(0) == "K" and major_from_trans(1) == "MN"
    with pytest.raises(InvalidInstructionError):
        major_from_trans(2)


# ---- gather and bounds -----------------------------------------------------------------

def test_gather_reads_little_endian_at_hand_addresses():
    smem = (np.arange(4096) * 7 % 251).astype(np.uint8)
    desc, mn, k, bits, major, cases = HAND_CASES["K none f16"]
    got = gather_operand(smem, desc, mn, k, "f16", major)
    assert got.dtype == np.uint16 and got.shape == (64, 16)
    for (i, j), byte, _ in cases:
        assert got[i, j] == int(smem[byte]) | int(smem[byte + 1]) << 8
    desc, mn, k, bits, major, cases = HAND_CASES["K 32B tf32"]
    got = gather_operand(smem, desc, mn, k, "tf32", major)
    assert got.dtype == np.uint32
    for (i, j), byte, _ in cases:
        assert got[i, j] == sum(int(smem[byte + q]) << 8 * q for q in range(4))


def test_gather_b1_bits():
    smem = np.zeros(1024, np.uint8)
    smem[144] = 0b100       # element (1, 130) of "K none b1": byte 144, bit 2
    smem[415] = 0b10000000  # element (9, 255): byte 415, bit 7
    desc, mn, k, bits, major, _ = HAND_CASES["K none b1"]
    got = gather_operand(smem, desc, mn, k, "b1", major)
    assert got.dtype == np.uint8
    assert got.sum() == 2 and got[1, 130] == 1 and got[9, 255] == 1


def test_mn_major_only_for_16_bit():
    with pytest.raises(InvalidInstructionError, match="e4m3"):
        gather_operand(np.zeros(8192, np.uint8), MatrixDescriptor(0, 1024, 128), 64, 32, "e4m3", "MN")


def test_bounds_error_names_descriptor_address_and_size():
    desc = MatrixDescriptor(0, 128, 1024)  # rows 8.. at +1024
    with pytest.raises(SharedMemoryBoundsError) as err:
        gather_operand(np.zeros(1000, np.uint8), desc, 64, 16, "f16", "K", name="b_desc")
    msg = str(err.value)
    assert "b_desc" in msg and "1000" in msg and "1024" in msg
    assert "stride_byte_offset=1024" in msg and "leading_byte_offset=128" in msg and "swizzle=none" in msg
    assert isinstance(err.value, IndexError)


def test_bounds_error_last_byte_of_element():
    # 8x16 f16 K-major none, LBO 1008: (7, 15) -> 7*16 + 1008 + 7*2 = 1134, bytes 1134-1135
    desc = MatrixDescriptor(0, 1008, 128)
    gather_operand(np.zeros(1136, np.uint8), desc, 8, 16, "f16", "K")
    with pytest.raises(SharedMemoryBoundsError, match="1134"):
        gather_operand(np.zeros(1135, np.uint8), desc, 8, 16, "f16", "K")


def test_bounds_error_below_image():
    # image at shared 144: element (0,0) absolute 144, 128B phase 1 -> 128, image byte -16
    desc = MatrixDescriptor(0, 16, 1024, 0, "128B")
    with pytest.raises(SharedMemoryBoundsError, match="-16"):
        gather_operand(np.zeros(8192, np.uint8), desc, 8, 16, "f16", "K", image_address=144)


def test_bad_shapes():
    d = MatrixDescriptor(0, 128, 256)
    with pytest.raises(OperandError):
        element_addresses(d, 60, 16, 16, "K")
    with pytest.raises(OperandError):
        element_addresses(d, 64, 12, 16, "K")
    with pytest.raises(OperandError):
        element_addresses(d, 64, 16, 16, "row")
    with pytest.raises(OperandError):
        gather_operand(np.zeros(16, np.int8), d, 64, 16, "f16")


def test_k_major_wider_than_the_swizzle_row_continues_at_lbo():
    # wgmma.mma_async.sp's B has 64 bytes of K; with a 32B swizzle the second 32 bytes of each
    # row lie LBO further (recorded: tests/golden/probes/q16_wgmma_sp/b_address, LBO apart from
    # the footprint).  f16 64x32, LBO 1024, SBO 256: element (i, j) at (i%8)*32 + (i//8)*256
    # + (j//16)*1024 + (j%16)*2, then bit 4 XORed with address bit 7.
    byte, _ = element_addresses(MatrixDescriptor(0, 1024, 256, 0, "32B"), 64, 32, 16, "K")
    assert byte[0, 15] == 30 and byte[0, 16] == 1024 and byte[1, 16] == 1056
    assert byte[4, 16] == 1152 ^ 16 and byte[8, 17] == 1024 + 256 + 2
    # 64B and 128B rows hold all 64 bytes: LBO plays no part
    for lbo in (16, 4096):
        byte, _ = element_addresses(MatrixDescriptor(0, lbo, 1024, 0, "128B"), 64, 32, 16, "K")
        assert byte[0, 31] == 62 and byte[1, 0] == 128 + 16


def test_operand_footprint_holds_every_byte_of_every_element():
    # 64x16 f16 K-major, no swizzle: rows (i%8)*16 + (i//8)*SBO, the two 16-byte chunks of K
    # at +0 and +LBO.  LBO 128, SBO 256: 2048 bytes without a gap.
    dense = operand_footprint(MatrixDescriptor(4096, 128, 256), 64, 16, 16, "K")
    np.testing.assert_array_equal(dense, 4096 + np.arange(2048))
    # LBO 256, SBO 512: each block of 8 rows is bytes [512b, 512b + 128) and [512b + 256, 512b + 384)
    sparse = operand_footprint(MatrixDescriptor(0, 256, 512), 64, 16, 16, "K")
    block = np.concatenate([np.arange(128), 256 + np.arange(128)])
    np.testing.assert_array_equal(sparse, np.concatenate([512 * b + block for b in range(8)]))
    # tf32 (4-byte elements) 8x8 at 16: every byte of [16, 16 + 8 rows x 32 bytes) with LBO 128:
    # rows at 16 * (i % 8), the second chunk of K at +128
    tf32 = operand_footprint(MatrixDescriptor(16, 128, 1024), 8, 8, 32, "K")
    np.testing.assert_array_equal(tf32, 16 + np.arange(256))
    # the start address moves the footprint by as much (1024 bytes keep the 128B swizzle's phase)
    moved = operand_footprint(MatrixDescriptor(4096 + 1024, 128, 256), 64, 16, 16, "K")
    np.testing.assert_array_equal(moved, dense + 1024)


def test_operand_footprint_checks_the_image_it_is_given():
    desc = MatrixDescriptor(0, 128, 1024)  # rows 8.. at +1024
    with pytest.raises(SharedMemoryBoundsError, match="a_desc.*1000"):
        operand_footprint(desc, 64, 16, 16, "K", image_size=1000, name="a_desc")
    assert operand_footprint(desc, 64, 16, 16, "K").max() == 7 * 1024 + 7 * 16 + 128 + 15


def test_element_addresses_are_the_callers_to_change():
    desc = MatrixDescriptor(256, 128, 256)
    byte, bit = element_addresses(desc, 64, 16, 16, "K")
    byte[:] = -1
    bit[:] = 5
    again, bit_again = element_addresses(desc, 64, 16, 16, "K")
    assert again[0, 0] == 256 and again[63, 15] == 2302 and not bit_again.any()
    smem = np.zeros(4096, np.uint8)
    smem[256:258] = [0x34, 0x12]
    assert gather_operand(smem, desc, 64, 16, "f16", "K")[0, 0] == 0x1234


@pytest.mark.parametrize("swizzle", ["128B", "64B", "32B"])
def test_a_k_loop_of_start_addresses_reads_what_each_descriptor_addresses(swizzle):
    """Descriptors that differ only in their start address (a k-loop's) share one cached
    layout per swizzle phase; every start must still read its own bytes.  Each expected
    address is the module's rule worked out element by element in plain Python."""
    w = SWIZZLE_BYTES[swizzle]
    rng = np.random.default_rng(7)
    smem = rng.integers(0, 256, 3 * 8192, dtype=np.uint8)
    for start in (0, 32, 128, 1024 + 32, 2048 + 896, 4096 + 16):
        desc = MatrixDescriptor(start, 16, 8 * w, 0, swizzle)
        got = gather_operand(smem, desc, 16, 8, "f16", "K")
        for i in range(16):
            for j in range(8):
                a = start + (i % 8) * w + (i // 8) * 8 * w + 2 * j
                a ^= (((a >> 7) & (w // 16 - 1)) << 4)
                assert int(got[i, j]) == int(smem[a]) | int(smem[a + 1]) << 8, (start, i, j)
