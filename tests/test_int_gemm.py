"""int_gemm / popc_gemm are bit-identical to the reference int_dot_mma / popc_mma."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import seed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastmma.kernels.int_dot import int_dot_mma, popc_mma
from fastmma.kernels.int_gemm import int_gemm, popc_gemm

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1

# (a_width, a_signed, b_width, b_signed)
OPERANDS = [(w, sa, w, sb) for w in (8, 4) for sa in (True, False) for sb in (True, False)]
SHAPES = [(1, 1), (7, 129), (64, 64), (129, 7), (130, 300)]


def _operand(rng, shape, width, masked=True):
    """Random element bits, one per byte; ``masked`` keeps only ``width`` bits."""
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    return x & np.uint8((1 << width) - 1) if masked else x


def _extreme_c(rng, m, n):
    """C near INT32_MIN and INT32_MAX (and around 0) so clamping and wrapping both happen."""
    base = rng.choice(np.array([I32_MIN, I32_MAX, 0], dtype=np.int64), size=(m, n))
    off = rng.integers(-300_000, 300_000, (m, n))
    return np.clip(base + off, I32_MIN, I32_MAX).astype(np.int32)


def _both_int(a, b, c, *args):
    m, n = a.shape[0], b.shape[1]
    ref = np.full((m, n), 12345, np.int32)
    got = np.full((m, n), -777, np.int32)
    int_dot_mma(a, b, c, ref, *args)
    int_gemm(a, b, c, got, *args)
    return ref, got


def _both_popc(a, b, c, xor, use_c):
    m, n = a.shape[0], b.shape[1]
    ref = np.full((m, n), 12345, np.int32)
    got = np.full((m, n), -777, np.int32)
    popc_mma(a, b, c, ref, xor, use_c)
    popc_gemm(a, b, c, got, xor, use_c)
    return ref, got


# ---------------------------------------------------------------------------------------
# integer


@pytest.mark.parametrize("aw,asg,bw,bsg", OPERANDS)
@pytest.mark.parametrize("satfinite", [True, False])
@pytest.mark.parametrize("m,n", SHAPES)
def test_int_matches_reference(aw, asg, bw, bsg, satfinite, m, n):
    rng = np.random.default_rng(seed(aw, asg, bsg, satfinite, m, n))
    for group in (16, 32) if aw == 8 else (32, 64):
        for mult in (1, 3, 10):
            k = group * mult
            a, b = _operand(rng, (m, k), aw), _operand(rng, (k, n), bw)
            c = _extreme_c(rng, m, n)
            ref, got = _both_int(a, b, c, aw, asg, bw, bsg, group, satfinite, True)
            np.testing.assert_array_equal(got, ref, err_msg=f"group={group} k={k}")


@pytest.mark.parametrize("satfinite", [True, False])
def test_clamp_happens_after_every_group(satfinite):
    """Rows climb past INT32_MAX in the first groups, then fall back: only a per-group clamp
    gives the reference's answer (and wrapping must wrap there too)."""
    m, n, group = 5, 37, 32
    k = 8 * group
    a = np.full((m, k), 127, np.uint8)
    a[:, k // 2:] = 0x80  # -128
    b = np.full((k, n), 127, np.uint8)
    c = np.full((m, n), I32_MAX - 100_000, np.int32)
    c[1] = I32_MIN + 100_000
    ref, got = _both_int(a, b, c, 8, True, 8, True, group, satfinite, True)
    np.testing.assert_array_equal(got, ref)
    if satfinite:
        assert (got[0] == I32_MAX - 4 * 127 * 128 * group).all()


@pytest.mark.parametrize("aw,asg,bw,bsg", OPERANDS)
@pytest.mark.parametrize("satfinite", [True, False])
def test_use_c_false_ignores_c(aw, asg, bw, bsg, satfinite):
    rng = np.random.default_rng(7)
    m, n, k = 33, 70, 128
    a, b = _operand(rng, (m, k), aw), _operand(rng, (k, n), bw)
    c = _extreme_c(rng, m, n)
    ref, got = _both_int(a, b, c, aw, asg, bw, bsg, 32, satfinite, False)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("aw,asg,bw,bsg", OPERANDS)
def test_bits_above_width_are_ignored(aw, asg, bw, bsg):
    rng = np.random.default_rng(11)
    m, n, k = 9, 40, 96
    a, b = _operand(rng, (m, k), aw, False), _operand(rng, (k, n), bw, False)
    c = _extreme_c(rng, m, n)
    ref, got = _both_int(a, b, c, aw, asg, bw, bsg, 32, True, True)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("group", [8, 48, 128, 512])
@pytest.mark.parametrize("satfinite", [True, False])
def test_other_groups_take_the_generic_path(group, satfinite):
    """Groups without a literal kernel, and u8 x u8 with 512 terms (past float32's exact
    range), must still agree."""
    rng = np.random.default_rng(group)
    m, n, k = 19, 45, 2 * group
    a, b = _operand(rng, (m, k), 8), _operand(rng, (k, n), 8)
    c = _extreme_c(rng, m, n)
    for signed in (True, False):
        ref, got = _both_int(a, b, c, 8, signed, 8, signed, group, satfinite, True)
        np.testing.assert_array_equal(got, ref)


def test_k_zero_returns_c():
    a, b = np.zeros((3, 0), np.uint8), np.zeros((0, 4), np.uint8)
    c = np.arange(12, dtype=np.int32).reshape(3, 4)
    for use_c in (True, False):
        ref, got = _both_int(a, b, c, 8, True, 8, True, 32, True, use_c)
        np.testing.assert_array_equal(got, ref)


def test_views_and_in_place():
    """Strided views for every operand, and out aliasing C."""
    rng = np.random.default_rng(3)
    big_a, big_b = _operand(rng, (80, 200), 8), _operand(rng, (200, 150), 8)
    a, b = big_a[3:70, 5:197], big_b[5:197:1, 2:143]
    big_c = _extreme_c(rng, 100, 160)
    c = big_c[10:77, 7:148]
    ref = np.empty(c.shape, np.int32)
    int_dot_mma(a, b, c, ref, 8, True, 8, False, 32, True, True)
    int_gemm(a, b, c, c, 8, True, 8, False, 32, True, True)
    np.testing.assert_array_equal(c, ref)


def test_k_not_multiple_of_group_raises():
    a, b = np.zeros((2, 40), np.uint8), np.zeros((40, 2), np.uint8)
    out = np.empty((2, 2), np.int32)
    with pytest.raises(ValueError):
        int_gemm(a, b, out, out, 8, True, 8, True, 32, True, True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 140),
    n=st.integers(1, 300),
    operands=st.sampled_from(OPERANDS),
    mult=st.integers(0, 12),
    group=st.sampled_from([16, 32, 64]),
    satfinite=st.booleans(),
    use_c=st.booleans(),
    masked=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_int_random(m, n, operands, mult, group, satfinite, use_c, masked, seed):
    aw, asg, bw, bsg = operands
    rng = np.random.default_rng(seed)
    k = group * mult
    a, b = _operand(rng, (m, k), aw, masked), _operand(rng, (k, n), bw, masked)
    c = _extreme_c(rng, m, n)
    ref, got = _both_int(a, b, c, aw, asg, bw, bsg, group, satfinite, use_c)
    np.testing.assert_array_equal(got, ref)


# ---------------------------------------------------------------------------------------
# b1


def _bits(rng, shape, density):
    return (rng.random(shape) < density).astype(np.uint8)


@pytest.mark.parametrize("xor", [False, True])
@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("m,n", SHAPES)
def test_popc_matches_reference(xor, density, m, n):
    rng = np.random.default_rng(int(density * 10) + 100 * m + n)
    for k in (1, 63, 64, 65, 128, 256, 1024, 1100, 2304):
        a, b = _bits(rng, (m, k), density), _bits(rng, (k, n), density)
        c = _extreme_c(rng, m, n)
        for use_c in (True, False):
            ref, got = _both_popc(a, b, c, xor, use_c)
            np.testing.assert_array_equal(got, ref, err_msg=f"k={k} use_c={use_c}")


def test_popc_mixed_densities_and_wrap():
    """A dense, B empty under XOR counts every bit; C at INT32_MAX makes the sum wrap."""
    rng = np.random.default_rng(5)
    m, n, k = 20, 30, 1500
    a, b = _bits(rng, (m, k), 1.0), _bits(rng, (k, n), 0.0)
    c = np.full((m, n), I32_MAX - 10, np.int32)
    for xor in (False, True):
        ref, got = _both_popc(a, b, c, xor, True)
        np.testing.assert_array_equal(got, ref)
    assert (got == np.int32(I32_MIN + k - 11)).all()


def test_popc_only_bit_zero_counts():
    rng = np.random.default_rng(9)
    m, n, k = 11, 13, 300
    a, b = rng.integers(0, 256, (m, k), np.uint8), rng.integers(0, 256, (k, n), np.uint8)
    c = _extreme_c(rng, m, n)
    for xor in (False, True):
        ref, got = _both_popc(a, b, c, xor, True)
        np.testing.assert_array_equal(got, ref)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 140),
    n=st.integers(1, 300),
    k=st.integers(0, 3000),
    density=st.sampled_from([0.0, 0.5, 1.0, 0.1, 0.9]),
    xor=st.booleans(),
    use_c=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_popc_random(m, n, k, density, xor, use_c, seed):
    rng = np.random.default_rng(seed)
    a, b = _bits(rng, (m, k), density), _bits(rng, (k, n), density)
    c = _extreme_c(rng, m, n)
    ref, got = _both_popc(a, b, c, xor, use_c)
    np.testing.assert_array_equal(got, ref)


def test_popc_views():
    """Strided operands (A without unit stride takes the scalar packer) and out aliasing C."""
    rng = np.random.default_rng(13)
    big_a, big_b = _bits(rng, (50, 2 * 700), 0.5), _bits(rng, (800, 90), 0.5)
    for a in (big_a[1:40, ::2], big_a[1:40, 3:703]):
        b = big_b[50:750, 3:80]
        c = _extreme_c(rng, 39, 77)
        ref = np.empty(c.shape, np.int32)
        popc_mma(a, b, c, ref, True, True)
        popc_gemm(a, b, c, c, True, True)
        np.testing.assert_array_equal(c, ref)


# ---------------------------------------------------------------------------------------
# stacks: each GEMM of a stack exactly what the reference gives it alone


def _stack_c(rng, count, m, n):
    return np.stack([_extreme_c(rng, m, n) for _ in range(count)])


STACKS = [(5, 64, 64, 128), (3, 130, 64, 300), (7, 1, 192, 1), (2, 8, 576, 8)]
GROUPS = [(32, True), (32, False), (16, True), (64, True), (48, True)]  # 64: s4/u4; 48: generic


@pytest.mark.parametrize("count,m,kk,n", STACKS)
@pytest.mark.parametrize("group,satfinite", [g for g in GROUPS if g[0] != 48])
def test_int_stack_matches_each_gemm(count, m, kk, n, group, satfinite):
    _check_int_stack(count, m, kk, n, group, satfinite)


@pytest.mark.parametrize("count,m,kk,n", STACKS[2:])
def test_int_stack_on_the_generic_path(count, m, kk, n):
    _check_int_stack(count, m, kk, n, 48, True)


def _check_int_stack(count, m, kk, n, group, satfinite):
    rng = np.random.default_rng(count * 1000 + kk + group)
    aw, asg, bw, bsg = (4, True, 4, False) if group == 64 else (8, True, 8, False)
    a, b = _operand(rng, (count, m, kk), aw), _operand(rng, (count, kk, n), bw)
    c = _stack_c(rng, count, m, n)
    for use_c in (True, False):
        got = np.full((count, m, n), -777, np.int32)
        int_gemm(a, b, c, got, aw, asg, bw, bsg, group, satfinite, use_c)
        for s in range(count):
            ref = np.full((m, n), 12345, np.int32)
            int_dot_mma(a[s], b[s], c[s], ref, aw, asg, bw, bsg, group, satfinite, use_c)
            np.testing.assert_array_equal(got[s], ref, err_msg=f"GEMM {s} of the stack")


def test_int_stack_of_views_with_a_broadcast_c():
    """Strided stacks, C one matrix broadcast over the stack (stride 0), out a strided view."""
    rng = np.random.default_rng(21)
    big_a, big_b = _operand(rng, (9, 70, 80), 8), _operand(rng, (10, 80, 150), 8)
    a, b = big_a[::2, 3:67, 8:72], big_b[1::2, 8:72, 2:143]
    c = np.broadcast_to(_extreme_c(rng, 64, 141), (5, 64, 141))
    out = np.zeros((5, 64, 2 * 141), np.int32)[:, :, ::2]
    int_gemm(a, b, c, out, 8, True, 8, True, 32, True, True)
    for s in range(5):
        ref = np.empty((64, 141), np.int32)
        int_dot_mma(a[s], b[s], c[s], ref, 8, True, 8, True, 32, True, True)
        np.testing.assert_array_equal(out[s], ref, err_msg=f"GEMM {s} of the stack")


@pytest.mark.parametrize("xor", [False, True])
@pytest.mark.parametrize("count,m,kk,n", [(6, 64, 256, 256), (3, 7, 129, 300), (4, 16, 8192, 8)])
def test_popc_stack_matches_each_gemm(xor, count, m, kk, n):
    rng = np.random.default_rng(count + kk)
    a = np.stack([_bits(rng, (m, kk), d) for d in np.linspace(0, 1, count)])
    b = np.stack([_bits(rng, (kk, n), d) for d in np.linspace(1, 0, count)])
    c = _stack_c(rng, count, m, n)
    got = np.full((count, m, n), -777, np.int32)
    popc_gemm(a, b, c, got, xor, True)
    for s in range(count):
        ref = np.full((m, n), 12345, np.int32)
        popc_mma(a[s], b[s], c[s], ref, xor, True)
        np.testing.assert_array_equal(got[s], ref, err_msg=f"GEMM {s} of the stack")


def test_empty_stacks():
    a, b = np.zeros((0, 4, 32), np.uint8), np.zeros((0, 32, 5), np.uint8)
    out = np.zeros((0, 4, 5), np.int32)
    int_gemm(a, b, out, out, 8, True, 8, True, 32, True, True)
    popc_gemm(a, b, out, out, False, True)
    assert out.shape == (0, 4, 5)


@pytest.mark.parametrize("instruction,atype,btype", [
    ("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.u8.satfinite", "s8", "u8"),
    ("wmma.mma.sync.aligned.row.col.m8n8k32.s32.s4.u4.s32", "s4", "u4"),
    ("wgmma.mma_async.sync.aligned.m64n32k256.s32.b1.b1.and.popc", "b1", "b1"),
])
def test_execute_stack_runs_integer_stacks_as_each_gemm(instruction, atype, btype):
    """kernels.execute_stack on an integer or b1 stack (one call of the stack kernels) gives
    each GEMM what the reference kernels give it alone."""
    from fastmma import kernels, parse

    inst = parse(instruction)
    m, n, kk = inst.shape.m, inst.shape.n, inst.shape.k
    rng = np.random.default_rng(5)
    width = 1 if atype == "b1" else int(atype[1:])
    count = 9
    a, b = _operand(rng, (count, m, kk), width), _operand(rng, (count, kk, n), width)
    c = _stack_c(rng, count, m, n).view(np.uint32)
    for use_c in (True, False):
        got = kernels.execute_stack(inst.rule, a, b, c, atype, btype, "s32", "s32", use_c=use_c)
        for s in range(count):
            ref = kernels.reference(inst.rule, a[s], b[s], c[s], atype, btype, "s32", "s32", use_c=use_c)
            np.testing.assert_array_equal(got[s], ref, err_msg=f"GEMM {s} of the stack")
