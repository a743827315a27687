"""experiments/kernels/sass_loops.py: loops found in nvdisasm and cuobjdump
listings, their per-pipe counts and bound, the cubin header rewrite, and the
errors on a listing that is not one (no GPU or CUDA tool needed)."""
import csv
import importlib.util
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "experiments", "kernels", "sass_loops.py")
spec = importlib.util.spec_from_file_location("sass_loops", TOOL)
sl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sl)

# One kernel of nvdisasm -c: an outer loop 0x40-0xd0 holding an inner loop
# 0x60-0xa0, and a forward branch that is not a loop.
NVDISASM = """\
\t.headerflags\t@"EF_CUDA_SM90"
//--------------------- .text._Z1kPj --------------------------
\t.section\t.text._Z1kPj,"ax",@progbits
_Z1kPj:
.text._Z1kPj:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/               @P0 BRA `(.L_x_2) ;
        /*0030*/                   MOV R2, RZ ;
.L_x_0:
        /*0040*/                   IMAD R3, R0, 0x3, R2 ;
        /*0050*/                   LDS R4, [R3] ;
.L_x_1:
        /*0060*/                   LOP3.LUT R5, R4, 0xfff, RZ, 0xc0, !PT ;
        /*0070*/                   SHF.R.U32.HI R4, RZ, 0x3, R4 ;
        /*0080*/                   IDP.4A.U8.U8 R6, R5, R5, R6 ;
        /*0090*/                   ISETP.NE.AND P1, PT, R4, RZ, PT ;
        /*00a0*/               @P1 BRA `(.L_x_1) ;
        /*00b0*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*00c0*/                   IADD3 R2, R2, 0x1, RZ ;
        /*00d0*/              @!P0 BRA `(.L_x_0) ;
.L_x_2:
        /*00e0*/                   EXIT ;
.L_x_3:
        /*00f0*/                   BRA `(.L_x_3);
"""

# The same inner loop as cuobjdump -sass prints it (absolute branch target).
CUOBJDUMP = """\
\tcode for sm_90
\t\tFunction : _Z1kPj
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;              /* 0x00000a00ff017b82 */
                                                                       /* 0x000fe20000000800 */
        /*0010*/                   LOP3.LUT R5, R4, 0xfff, RZ, 0xc0, !PT ;
        /*0020*/                   HFMA2 R6, R5, R5, R6 ;
        /*0030*/                   HFMA2.RELU R6, R5, R5, R6 ;
        /*0040*/               @P1 BRA 0x10 ;
        /*0050*/                   EXIT ;
"""


def test_nvdisasm_loops_and_pipes():
    funcs = sl.parse(NVDISASM.split("\n"))
    assert list(funcs) == ["_Z1kPj"]
    code, labels = funcs["_Z1kPj"]
    found = sl.loops(code, labels)
    spans = [(a, b, len(body)) for a, b, body in found]
    # the inner loop's branch comes first; the trailing self-branch is a 1-instruction loop
    assert spans == [(0x60, 0xA0, 5), (0x40, 0xD0, 10), (0xF0, 0xF0, 1)]
    ops, pipes = sl.mix(found[0][2])
    assert ops["IDP.4A.U8.U8"] == 1 and ops["BRA"] == 1
    assert pipes["alu"] == 3 and pipes["fma_heavy"] == 1 and pipes["control"] == 1
    ops, pipes = sl.mix(found[1][2])
    assert pipes["fma_heavy"] == 2 and pipes["lsu"] == 1 and pipes["tensor"] == 1 and pipes["alu"] == 4


def test_cuobjdump_absolute_targets():
    funcs = sl.parse(CUOBJDUMP.split("\n"))
    code, labels = funcs["_Z1kPj"]
    found = sl.loops(code, labels)
    assert [(a, b, len(body)) for a, b, body in found] == [(0x10, 0x40, 4)]
    ops, pipes = sl.mix(found[0][2])
    assert pipes["fma_heavy"] == 2 and pipes["alu"] == 1


def test_opcode_drops_predicates():
    assert sl.opcode("@!UP0 IMAD.WIDE.U32 R2, R3, R4, R5") == "IMAD.WIDE.U32"
    assert sl.pipe("IMAD.WIDE.U32") == "fma_heavy"
    assert sl.pipe("FROB") == "other"


def run(*args, **kw):
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True, **kw)


def test_cli_csv_and_bound(tmp_path):
    listing = tmp_path / "k.sass"
    listing.write_text(NVDISASM)
    loops_csv, ops_csv = tmp_path / "loops.csv", tmp_path / "ops.csv"
    r = run(str(listing), "--min", "5", "--csv", str(loops_csv), "--opcodes", str(ops_csv))
    assert r.returncode == 0, r.stderr
    with open(loops_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:7] == ["kernel", "first", "last", "inner", "instructions", "alu", "fma_heavy"]
    assert len(rows) == 2  # the inner and the outer loop (the 1-instruction one is under --min)
    inner, outer = rows
    assert inner["kernel"] == outer["kernel"] == "k(unsigned int*)"
    assert (inner["inner"], outer["inner"]) == ("1", "0")
    # 5 issued, 3 ALU at 2 cycles each: bound by the ALU
    assert inner["instructions"] == "5" and inner["cycles_bound"] == "6" and inner["bound_by"] == "alu"
    assert "IDP.4A.U8.U8" in ops_csv.read_text()


def test_cli_errors(tmp_path):
    r = run(str(tmp_path / "missing.sass"))
    assert r.returncode != 0 and "missing.sass" in r.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    r = run(str(junk))
    assert r.returncode != 0 and "no kernel found" in r.stderr
    listing = tmp_path / "k.sass"
    listing.write_text(NVDISASM)
    r = run(str(listing), "--kernel", "nomatch")
    assert r.returncode != 0 and "no loop" in r.stderr
    r = run("--bogus")
    assert r.returncode == 2


def test_patch_elf(tmp_path):
    hdr = bytearray(64)
    hdr[:4] = b"\x7fELF"
    hdr[4], hdr[5], hdr[7], hdr[8] = 2, 1, 0x41, 8
    struct.pack_into("<I", hdr, 0x30, 0xA005A04)  # nvcc 13, sm_90a
    src, dst = tmp_path / "a.cubin", tmp_path / "b.cubin"
    src.write_bytes(bytes(hdr) + b"code")
    r = run("--patch-elf", str(src), str(dst))
    assert r.returncode == 0, r.stderr
    out = dst.read_bytes()
    assert out[7] == 0x33 and out[8] == 7
    assert struct.unpack_from("<I", out, 0x30)[0] == 0x5A055A
    assert out[64:] == b"code"
    src.write_bytes(b"not an elf")
    r = run("--patch-elf", str(src), str(dst))
    assert r.returncode != 0 and "not a 64-bit ELF" in r.stderr


PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kPj' for 'sm_90a'
ptxas info    : Function properties for _Z1kPj
    288 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 96 registers, used 2 barriers, 288 bytes cumulative stack size
ptxas info    : Compiling entry function '_Z1gv' for 'sm_90a'
ptxas info    : Function properties for _Z1gv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers
"""


def test_ptxas_registers_and_spills(tmp_path):
    assert sl.parse_ptxas(PTXAS.split("\n")) == [("_Z1kPj", 96, 8, 4, 288), ("_Z1gv", 40, 0, 0, 0)]
    log, out = tmp_path / "k.ptxas", tmp_path / "regs.csv"
    log.write_text(PTXAS)
    r = run("--ptxas", str(log), "--csv", str(out))
    assert r.returncode == 0, r.stderr
    assert "2 kernels, registers 40 - 96, 1 spill" in r.stdout
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(x["kernel"], x["registers"], x["spill_stores"]) for x in rows] == [
        ("k(unsigned int*)", "96", "8"), ("g()", "40", "0")]
    junk = tmp_path / "junk.log"
    junk.write_text("nothing\n")
    r = run("--ptxas", str(junk))
    assert r.returncode != 0 and "Compiling entry function" in r.stderr
