"""fastmma.warpgroup: the asynchronous wgmma state of one warpgroup.

Expected values come from the H100 recordings or from fastmma.wgmma.mma_async (the stateless
single-instruction arithmetic, verified against every recording elsewhere), never from the
Warpgroup under test.  Every hazard test also shows that the same program with the hazard
removed runs, and that the failed instruction changed nothing.
"""

import numpy as np
import pytest

from conftest import GOLDEN, golden_files
from fastmma import wgmma
from fastmma.conform import load_recording
from fastmma.errors import HazardError, InvalidInstructionError, OperandError, SharedMemoryBoundsError
from fastmma.isa import parse
from fastmma.layout.descriptor import MatrixDescriptor, element_addresses
from fastmma.warpgroup import Warpgroup, register_names, replay_case

CHAIN = GOLDEN / "wgmma" / "wgmma.chain4.m64n32k16.f32.f16.f16.adesc.ta0.tb0.sa1.sb1.npz"
AREG = GOLDEN / "wgmma" / "wgmma.m64n16k16.f32.f16.f16.areg.tb0.sa1.sb-1.npz"
INST = parse("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16")
INST16 = parse("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16")
D = register_names("%f", 16, 1)      # accumulators of INST
D2 = register_names("%f", 16, 101)   # a second, independent accumulator set
A_DESC = register_names("%rd", 4, 0)
B_DESC = register_names("%rd", 4, 10)


@pytest.fixture(scope="module")
def chain():
    arrays, meta = load_recording(CHAIN)
    return arrays, meta


@pytest.fixture(scope="module")
def areg():
    return load_recording(AREG)


@pytest.fixture
def case(chain):
    arrays, _ = chain
    i = 0
    assert arrays["scale_d"][i]
    return {"smem": arrays["smem"][i], "c": arrays["c_regs"][i], "d": arrays["d_regs"][i],
            "a": [int(x) for x in arrays["a_desc"][i]], "b": [int(x) for x in arrays["b_desc"][i]]}


def make_wg(case, strict=True):
    """A warpgroup holding the recorded image, C in D and D2, descriptors in %rd0-3 / %rd10-13."""
    wg = Warpgroup(case["smem"], strict=strict)
    wg.write(D, case["c"])
    wg.write(D2, case["c"])
    for j in range(4):
        wg.write(A_DESC[j], np.uint64(case["a"][j]))
        wg.write(B_DESC[j], np.uint64(case["b"][j]))
    wg.declare("p", bits=1)
    return wg


def step(case, c, j, scale_d=True, smem=None):
    """Instruction j of the recorded chain on accumulators c (the stateless reference)."""
    return wgmma.mma_async(INST, c, a_desc=case["a"][j], b_desc=case["b"][j],
                           smem=case["smem"] if smem is None else smem, scale_d=scale_d)


def issue(wg, j, d=D, **kw):
    return wg.mma_async(INST, d=d, a=A_DESC[j], b_desc=B_DESC[j], **kw)


def snapshot(wg):
    return {
        "regs": {name: wg.peek(name).copy() for name in wg.registers},
        "smem": wg.smem.copy(),
        "groups": wg.pending_groups,
        "in_flight": [(r.seq, r.group, r.d, r.a) for r in wg.in_flight],
    }


def assert_unchanged(wg, before):
    after = snapshot(wg)
    assert after["regs"].keys() == before["regs"].keys()
    for name, value in before["regs"].items():
        np.testing.assert_array_equal(after["regs"][name], value, err_msg=name)
    np.testing.assert_array_equal(after["smem"], before["smem"])
    assert after["groups"] == before["groups"]
    assert after["in_flight"] == before["in_flight"]


def read_byte_of(case, j, which="b"):
    """An image byte the descriptor of instruction j reads (from the layout code)."""
    if which == "b":
        byte, _ = element_addresses(case["b"][j], 32, 16, 16, "K")
    else:
        byte, _ = element_addresses(case["a"][j], 64, 16, 16, "K")
    return int(byte[3, 5])


# ---------------------------------------------------------------- asynchronous semantics


def test_results_invisible_before_wait_and_visible_after(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    np.testing.assert_array_equal(wg.peek(D), case["c"])
    wg.commit_group()
    np.testing.assert_array_equal(wg.peek(D), case["c"])
    assert wg.pending_groups == 1
    wg.wait_group(0)
    assert wg.pending_groups == 0 and wg.in_flight == ()
    expected = step(case, case["c"], 0)
    assert not np.array_equal(expected, case["c"])
    np.testing.assert_array_equal(wg.read(D), expected)


def test_same_shape_chain_without_fence_matches_the_recording(case):
    wg = make_wg(case)
    wg.fence()
    for j in range(4):
        issue(wg, j)
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), case["d"])


@pytest.mark.parametrize("how", ["write", "write_all", "declare_other", "in_flight_part"])
def test_the_next_wgmma_reads_what_the_accumulators_hold(case, how):
    """After a completion, C is what D's registers hold then, whatever was written since
    (one register, all of them, none of them), and a pending wgmma's results where it covers
    part of them (non-strict mode): each expected C is put together from the stateless
    reference, register by register."""
    wg = make_wg(case, strict=how != "in_flight_part")
    wg.fence()
    issue(wg, 0)
    wg.commit_group()
    wg.wait_group(0)
    held = step(case, case["c"], 0)
    np.testing.assert_array_equal(wg.peek(D), held)
    if how == "write":
        wg.write(D[5], np.arange(128, dtype=np.float32) - 64)
        held[:, 5] = (np.arange(128, dtype=np.float32) - 64).view(np.uint32)
    elif how == "write_all":
        wg.write(D, case["c"])
        held = case["c"].copy()
    elif how == "declare_other":
        wg.declare(["%unrelated0", "%unrelated1"])
    np.testing.assert_array_equal(wg.peek(D), held)
    np.testing.assert_array_equal(wg.peek(list(D)), held)
    wg.fence()
    if how == "in_flight_part":  # an m64n16 wgmma on D's first 8 registers, still pending
        wg.mma_async(INST16, d=D[:8], a=A_DESC[1], b_desc=B_DESC[1])
        held[:, :8] = wgmma.mma_async(INST16, held[:, :8], a_desc=case["a"][1], b_desc=case["b"][1],
                                      smem=case["smem"])
    issue(wg, 1)
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, held, 1))


def test_chain_spanning_groups_accumulates_in_order(case):
    wg = make_wg(case)
    wg.fence()
    for j in range(4):
        issue(wg, j)
        wg.commit_group()
    assert wg.pending_groups == 4
    wg.wait_group(2)
    expected = step(case, step(case, case["c"], 0), 1)
    np.testing.assert_array_equal(wg.peek(D), expected)
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), case["d"])


def test_wait_group_1_leaves_exactly_the_newest_group_pending(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0, d=D)
    wg.commit_group()
    issue(wg, 1, d=D2)
    wg.commit_group()
    wg.wait_group(1)
    assert wg.pending_groups == 1
    assert [r.d for r in wg.in_flight] == [tuple(D2)]
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))
    np.testing.assert_array_equal(wg.peek(D2), case["c"])
    with pytest.raises(HazardError):
        wg.read(D2[0])
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D2), step(case, case["c"], 1))


def test_uncommitted_wgmma_is_not_waited(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    wg.wait_group(0)
    assert len(wg.uncommitted) == 1 and len(wg.in_flight) == 1
    np.testing.assert_array_equal(wg.peek(D), case["c"])
    with pytest.raises(HazardError, match="not committed"):
        wg.read(D[3])
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


def test_empty_groups_count_and_complete_in_order(case):
    wg = make_wg(case)
    wg.commit_group()
    assert wg.pending_groups == 1
    wg.wait_group(0)
    assert wg.pending_groups == 0
    wg.fence()
    issue(wg, 0)
    wg.commit_group()          # group with the wgmma
    wg.commit_group()          # empty group, newer
    wg.wait_group(1)           # completes the oldest only
    assert wg.pending_groups == 1 and wg.in_flight == ()
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


def test_scale_d_predicate_and_negation(case):
    wg = make_wg(case)
    wg.write("p", False)
    wg.fence()
    issue(wg, 0, d=D, scale_d="p")
    issue(wg, 1, d=D2, scale_d="!p")
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0, scale_d=False))
    np.testing.assert_array_equal(wg.read(D2), step(case, case["c"], 1, scale_d=True))


def test_a_from_registers_matches_the_recording(areg):
    arrays, meta = areg
    text = meta["ptx"][1]
    inst = parse(text)
    d, a = inst.operands[0].regs, inst.operands[1].regs
    for i in range(len(arrays["mode"])):
        wg = Warpgroup(arrays["smem"][i])
        wg.write(d, arrays["c_regs"][i])
        wg.write(a, arrays["a_regs"][i])
        wg.write("%rd27", arrays["b_desc"][i])
        wg.write("p", bool(arrays["scale_d"][i]))
        for statement in ("wgmma.fence.sync.aligned;", text, "wgmma.commit_group.sync.aligned;",
                          "wgmma.wait_group.sync.aligned 0;"):
            wg.execute(statement)
        np.testing.assert_array_equal(wg.read(d), arrays["d_regs"][i])


# ---------------------------------------------------------------- hazard 1: no fence


def test_mma_async_before_any_fence(case):
    wg = make_wg(case)
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"no prior wgmma\.fence.*9\.7\.15\.7\.1") as err:
        issue(wg, 0)
    assert "wgmma.mma_async #0" in str(err.value) and "m64n32k16" in str(err.value)
    assert_unchanged(wg, before)
    wg.fence()
    issue(wg, 0)
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


# ---------------------------------------------------------------- hazard 2: in-flight registers


@pytest.mark.parametrize("access", ["read", "write"])
def test_thread_access_to_in_flight_accumulator(case, access):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    wg.commit_group()
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"%f5 .*accumulator.*wgmma\.mma_async #0.*wait_group") as err:
        wg.read(D[4]) if access == "read" else wg.write(D[4], 7)
    assert "9.7.15.7.3" in str(err.value)
    assert_unchanged(wg, before)
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


@pytest.mark.parametrize("access", ["read", "write"])
def test_thread_access_to_in_flight_a_fragment(areg, access):
    arrays, meta = areg
    inst = parse(meta["ptx"][1])
    d, a = inst.operands[0].regs, inst.operands[1].regs
    wg = Warpgroup(arrays["smem"][0])
    wg.write(d, arrays["c_regs"][0])
    wg.write(a, arrays["a_regs"][0])
    wg.write("%rd27", arrays["b_desc"][0])
    wg.write("p", bool(arrays["scale_d"][0]))
    wg.fence()
    wg.mma_async(inst)
    wg.commit_group()
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"register %r96 .*A fragment.*wait_group"):
        wg.read(a[2]) if access == "read" else wg.write(a[2], np.uint32(1))
    assert_unchanged(wg, before)
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(a), arrays["a_regs"][0])
    np.testing.assert_array_equal(wg.read(d), arrays["d_regs"][0])


def test_wgmma_reading_in_flight_accumulator_as_a(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"reads register %f1, the accumulator"):
        wg.mma_async("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16", d=D2, a=D[:4], b_desc=B_DESC[0])
    assert_unchanged(wg, before)


def test_different_shape_into_in_flight_accumulator(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"%f1, an accumulator register of wgmma\.mma_async #0.*not same-shape"):
        wg.mma_async(INST16, d=D[:8], a=A_DESC[1], b_desc=B_DESC[1])
    assert_unchanged(wg, before)
    wg.commit_group()
    wg.wait_group(0)
    wg.mma_async(INST16, d=D[:8], a=A_DESC[1], b_desc=B_DESC[1])   # allowed once complete
    wg.commit_group()
    wg.wait_group(0)
    c16 = step(case, case["c"], 0)[:, :8]
    expected = wgmma.mma_async(INST16, c16, a_desc=case["a"][1], b_desc=case["b"][1], smem=case["smem"])
    np.testing.assert_array_equal(wg.read(D[:8]), expected)


# ---------------------------------------------------------------- hazard 3: access without a fence


@pytest.mark.parametrize("access", ["read", "written"])
def test_accumulator_accessed_after_fence(case, access):
    wg = make_wg(case)
    wg.fence()
    if access == "read":
        wg.read(D[2])
    else:
        wg.write(D[2], case["c"][:, 2])
    before = snapshot(wg)
    with pytest.raises(HazardError, match=rf"accumulator \(d\) register %f3 was {access} by a thread after "
                                          r"the last wgmma\.fence.*9\.7\.15\.7\.1"):
        issue(wg, 0)
    assert_unchanged(wg, before)
    wg.fence()
    issue(wg, 0)
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


def test_register_written_between_wgmmas_needs_a_new_fence(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    wg.commit_group()
    wg.wait_group(0)
    first = wg.read(D)
    wg.write(D, first)          # a thread write between the two wgmmas
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"%f1 was written by a thread after the last wgmma\.fence"):
        issue(wg, 1)
    assert_unchanged(wg, before)
    wg.fence()
    issue(wg, 1)
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, first, 1))


def test_a_fragment_written_after_fence(areg):
    arrays, meta = areg
    inst = parse(meta["ptx"][1])
    d, a = inst.operands[0].regs, inst.operands[1].regs
    wg = Warpgroup(arrays["smem"][0])
    wg.write(d, arrays["c_regs"][0])
    wg.write("%rd27", arrays["b_desc"][0])
    wg.write("p", True)
    wg.fence()
    wg.write(a, arrays["a_regs"][0])
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"A fragment register %r94 was written"):
        wg.mma_async(inst)
    assert_unchanged(wg, before)


def test_descriptor_and_predicate_registers_need_no_fence(case):
    wg = make_wg(case)
    wg.fence()
    wg.write(A_DESC[0], np.uint64(case["a"][0]))
    wg.write("p", True)
    issue(wg, 0, scale_d="p")
    wg.write(A_DESC[0], np.uint64(0))   # descriptors are read at issue
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


# ---------------------------------------------------------------- hazard 4: shared memory


@pytest.mark.parametrize("offset", [0, 1], ids=["first_byte", "second_byte"])
@pytest.mark.parametrize("which", ["a", "b"])
def test_smem_written_while_pending_wgmma_reads_it(case, which, offset):
    """An operand's footprint is every byte of its elements: a write starting at an f16
    element's second byte is caught at that byte, not at the next element's first."""
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    wg.commit_group()
    byte = read_byte_of(case, 0, which) + offset
    before = snapshot(wg)
    with pytest.raises(HazardError, match=rf"image byte {byte} \(shared address {byte:#x}\).*"
                                          r"wgmma\.mma_async #0.*9\.7\.15\.5\.2"):
        wg.write_smem(byte, b"\x00\x00\x00")
    assert_unchanged(wg, before)
    wg.wait_group(0)
    wg.write_smem(byte, b"\x00\x00\x00")
    np.testing.assert_array_equal(wg.read_smem(byte, 3), [0, 0, 0])
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))


def test_smem_write_elsewhere_is_allowed_while_pending(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    last = wg.smem.size - 1
    reads = set(element_addresses(case["b"][0], 32, 16, 16)[0].ravel()) | \
        set(element_addresses(case["a"][0], 64, 16, 16)[0].ravel())
    assert last not in reads and last - 1 not in reads
    wg.write_smem(last, b"\x5a")
    wg.commit_group()
    wg.wait_group(0)
    assert wg.read_smem(last, 1)[0] == 0x5A


def test_smem_write_needs_proxy_fence_before_wgmma(case):
    wg = make_wg(case)
    byte = read_byte_of(case, 0)
    changed = case["smem"].copy()
    changed[byte] ^= 0x40
    wg.write_smem(byte, changed[byte:byte + 1])
    wg.fence()
    before = snapshot(wg)
    with pytest.raises(HazardError, match=rf"image byte {byte}.*fence\.proxy\.async.*9\.7\.15\.4"):
        issue(wg, 0)
    assert_unchanged(wg, before)
    wg.fence_proxy_async()
    issue(wg, 0)
    wg.commit_group()
    wg.wait_group(0)
    expected = step(case, case["c"], 0, smem=changed)
    assert not np.array_equal(expected, step(case, case["c"], 0))
    np.testing.assert_array_equal(wg.read(D), expected)


# ---------------------------------------------------------------- failed instructions change nothing


def test_bounds_error_changes_nothing(case):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0)
    far = MatrixDescriptor(start_address=wg.smem.size - 64, leading_byte_offset=16, stride_byte_offset=128)
    wg.write(B_DESC[3], np.uint64(far.encode()))
    before = snapshot(wg)
    with pytest.raises(SharedMemoryBoundsError, match="b_desc"):
        issue(wg, 3, d=D2)
    assert_unchanged(wg, before)
    assert len(wg.uncommitted) == 1


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"d": D[:15]}, OperandError, "16 accumulator registers"),
    ({"d": D[:15] + ["%f999"]}, OperandError, "%f999 does not exist"),
    ({"d": D[:15] + [D[0]]}, OperandError, "distinct"),
    ({"d": D, "a": "%f1"}, OperandError, "64-bit"),
    ({"d": D, "b_desc": "p"}, OperandError, "expected 64-bit"),
    ({"d": D, "scale_d": "%rd0"}, OperandError, "expected a predicate"),
])
def test_bad_operand_changes_nothing(case, kwargs, error, fragment):
    wg = make_wg(case)
    wg.fence()
    issue(wg, 0, d=D2)
    before = snapshot(wg)
    args = {"a": A_DESC[1], "b_desc": B_DESC[1], **kwargs}
    with pytest.raises(error, match=fragment):
        wg.mma_async(INST, **args)
    assert_unchanged(wg, before)


def test_invalid_instruction_text():
    wg = Warpgroup(1024)
    with pytest.raises(InvalidInstructionError):
        wg.execute("wgmma.mma_async.sync.aligned.m64n7k16.f32.f16.f16")
    with pytest.raises(OperandError, match="not in the instruction text"):
        wg.mma_async("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16")
    with pytest.raises(OperandError, match="non-negative"):
        wg.wait_group(-1)


# ---------------------------------------------------------------- warpgroup-wide operands


def test_descriptor_differing_between_threads(case):
    wg = make_wg(case)
    values = np.full(128, case["a"][0], dtype=np.uint64)
    values[77] = case["a"][1]
    wg.write(A_DESC[0], values)
    wg.fence()
    before = snapshot(wg)
    with pytest.raises(HazardError, match=r"%rd0 .*thread 77"):
        issue(wg, 0)
    assert_unchanged(wg, before)
    lax = make_wg(case, strict=False)
    lax.write(A_DESC[0], values)
    issue(lax, 0)
    lax.commit_group()
    lax.wait_group(0)
    np.testing.assert_array_equal(lax.read(D), step(case, case["c"], 0))


# ---------------------------------------------------------------- non-strict mode


def test_non_strict_runs_without_fence_and_reads_old_values(case):
    wg = make_wg(case, strict=False)
    issue(wg, 0)
    np.testing.assert_array_equal(wg.read(D), case["c"])       # not written yet
    wg.write(D[0], np.uint32(0xDEADBEEF))                       # lost: completion overwrites it
    issue(wg, 1)                                                # chains onto #0's result, not the write
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, step(case, case["c"], 0), 1))


def test_non_strict_smem_write_after_issue_does_not_change_the_result(case):
    wg = make_wg(case, strict=False)
    issue(wg, 0)
    byte = read_byte_of(case, 0)
    wg.write_smem(byte, np.uint8(wg.smem[byte] ^ 0xFF))
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))
    assert wg.smem[byte] == case["smem"][byte] ^ 0xFF


# ---------------------------------------------------------------- register file


def test_register_file_widths_and_views():
    wg = Warpgroup(256)
    wg.write("%f1", np.full(128, 1.5, dtype=np.float32))
    assert wg.read("%f1")[0] == 0x3FC00000
    assert wg.read("%f1", np.float32)[5] == 1.5
    wg.write("%r2", np.arange(128) - 64, bits=32)          # int64 values that fit 32 bits
    assert wg.read("%r2")[0] == 0xFFFFFFC0
    wg.write("%rd3", 0xC000000000000010, bits=64)
    assert wg.read("%rd3").dtype == np.uint64 and int(wg.read("%rd3")[127]) == 0xC000000000000010
    wg.write("p", True)
    assert wg.read("p").dtype == np.bool_ and wg.read("p").all()
    wg.declare(register_names("%f", 3, 10))
    np.testing.assert_array_equal(wg.read(["%f10", "%f11", "%f12"]), np.zeros((128, 3), np.uint32))
    assert wg.registers == {"%f1": 32, "%r2": 32, "%rd3": 64, "p": 1, "%f10": 32, "%f11": 32, "%f12": 32}
    with pytest.raises(OperandError, match=r"must lie in \[-2147483648, 4294967295\] to fit a 32-bit register"):
        wg.write("%r2", 1 << 32)
    with pytest.raises(OperandError, match="is 32-bit, not 64-bit"):
        wg.declare("%r2", bits=64)
    with pytest.raises(OperandError, match="width cannot be told"):
        wg.write("%r9", 5)
    with pytest.raises(OperandError, match="does not exist"):
        wg.read("%r9")
    with pytest.raises(OperandError, match="shape"):
        wg.write(["%f10", "%f11"], np.zeros((128, 3), np.uint32))
    for bad in (["%f10", ["%f11"]], [{"%f10"}], ["%f10", 7], ["9f"], ["%f10", "a b"]):
        with pytest.raises(OperandError, match="is not a register name"):
            wg.read(bad)
    assert "%r9" not in wg and "%r2" in wg


def test_register_file_growth_order_and_copies(case):
    """Registers keep their values while hundreds more are created after them; any order of
    names (reversed, repeated, interleaved with registers created elsewhere) reads and
    writes the right ones; what a read returns is a copy, never the registers themselves."""
    wg = Warpgroup(256)
    values = np.arange(128 * 8, dtype=np.uint32).reshape(128, 8)
    first = register_names("%r", 8)
    wg.write(first, values)
    got = wg.read(first)
    wg.declare(register_names("%x", 500))
    wg.write("%r3", 7)
    np.testing.assert_array_equal(got, values)  # the earlier read did not change
    values[:, 3] = 7
    np.testing.assert_array_equal(wg.read(first), values)
    order = ["%r7", "%x499", "%r0", "%r0", "%x3"]
    expect = np.stack([values[:, 7], np.zeros(128), values[:, 0], values[:, 0], np.zeros(128)], axis=1)
    np.testing.assert_array_equal(wg.read(order), expect)
    wg.read(first)[:, 1] = 99
    wg.read("%r1")[:] = 99
    np.testing.assert_array_equal(wg.read("%r1"), values[:, 1])
    wg.write(first[::-1], values)
    np.testing.assert_array_equal(wg.read(first), values[:, ::-1])

    # accumulators whose registers were created apart and in another order than d names them
    wg = make_wg(case)
    d = D[8:] + D[:8]
    wg.declare(register_names("%y", 40))
    wg.fence()
    wg.mma_async(INST, d=d, a=A_DESC[0], b_desc=B_DESC[0])
    wg.commit_group()
    wg.wait_group(0)
    c = np.concatenate([case["c"][:, 8:], case["c"][:, :8]], axis=1)
    expect = wgmma.mma_async(INST, c, a_desc=case["a"][0], b_desc=case["b"][0], smem=case["smem"])
    np.testing.assert_array_equal(wg.read(d), expect)


def test_smem_image_and_bounds():
    wg = Warpgroup(b"\x01\x02\x03\x04", smem_address=1024)
    wg.write_smem(1, np.array([0x0605], dtype=np.uint16))
    np.testing.assert_array_equal(wg.read_smem(0, 4), [1, 5, 6, 4])
    with pytest.raises(SharedMemoryBoundsError):
        wg.write_smem(3, b"\x00\x00")
    with pytest.raises(SharedMemoryBoundsError):
        wg.read_smem(-1, 1)
    with pytest.raises(ValueError):
        wg.smem[0] = 9
    np.testing.assert_array_equal(wg.read_smem(0, 4), [1, 5, 6, 4])


# ---------------------------------------------------------------- recordings through the Warpgroup


def _subset():
    files = golden_files("wgmma")
    chosen = [p for p in files if ".chain4." in p.name]
    seen = set()
    for p in files:
        if ".chain4." in p.name:
            continue
        types = tuple(p.name.split(".")[2:5]) + (".areg" in p.name,)   # dtype, atype, btype, A source
        if types not in seen:
            seen.add(types)
            chosen.append(p)
    return chosen


SUBSET = _subset()


def test_subset_covers_every_type():
    for source in (".adesc", ".areg"):
        atypes = {p.name.split(".")[3] for p in SUBSET if ".chain4." not in p.name and source in p.name}
        assert {"f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8", "b1"} <= atypes
    assert sum(".chain4." in p.name for p in SUBSET) == 4


@pytest.mark.parametrize("path", SUBSET, ids=lambda p: p.stem)
def test_recording_through_warpgroup(path):
    arrays, meta = load_recording(path)
    for i in range(len(arrays["mode"])):
        np.testing.assert_array_equal(replay_case(arrays, meta, i), arrays["d_regs"][i], err_msg=f"case {i}")


def test_replay_detects_a_wrong_result(chain):
    arrays, meta = chain
    bad = dict(arrays)
    bad["c_regs"] = arrays["c_regs"].copy()
    bad["c_regs"][0, 9, 3] ^= 1 << 20
    assert not np.array_equal(replay_case(bad, meta, 0), arrays["d_regs"][0])


def test_descriptor_values_instead_of_registers(case):
    wg = make_wg(case)
    wg.fence()
    wg.mma_async(INST, d=D, a=MatrixDescriptor.decode(case["a"][0]), b_desc=case["b"][0], scale_d=True)
    wg.commit_group()
    wg.wait_group(0)
    np.testing.assert_array_equal(wg.read(D), step(case, case["c"], 0))
