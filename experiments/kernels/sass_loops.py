#!/usr/bin/env python3
"""Instruction mix of the loops of every kernel in a SASS listing.

Reads what `nvdisasm -c` or `cuobjdump -sass` prints, finds each kernel's
loops (a branch back to a label at or before it: the loop is the span from
that label to the branch, so an inner loop is counted inside its outer one
too) and counts their instructions per opcode and per issue pipe of an
sm_80 / sm_90 sub-partition.  The ALU and FMA-heavy pipes take a warp
instruction every 2 cycles (16 lanes), so `cycles_bound` = max(issued,
2 * alu, 2 * fma_heavy) is the fewest cycles a warp scheduler needs per pass
of the loop when nothing else stalls it; it is a static count, not a time.

    sass_loops.py LISTING [--kernel SUBSTR] [--min N] [--csv FILE] [--opcodes FILE]
    sass_loops.py --ptxas LOG [--kernel SUBSTR] [--csv FILE]
    sass_loops.py --patch-elf IN.cubin OUT.cubin

--ptxas reads what `nvcc -Xptxas -v` printed: a row per kernel with its
registers, spill stores and loads and stack frame (bytes).

--patch-elf rewrites the ELF header of a cubin made by nvcc 13 (ELF ABI 8) to
the older layout (CUDA OS/ABI 0x33, ABI 7, sm in the low byte of e_flags)
that the nvdisasm of Debian's CUDA 11.8 reads; the code sections are not
touched.  experiments/kernels/sass_cpu.sh runs both steps.
"""
import argparse
import bisect
import collections
import csv
import re
import struct
import sys

# Issue pipes of an sm_80 / sm_90 sub-partition by opcode (the part of the
# opcode before the first dot).  Not listed: "other".
PIPES = {
    'alu': 'LOP3 LOP SHF PRMT IADD3 ISETP FSETP HSETP2 LEA SEL FSEL FMNMX IMNMX VIMNMX BMSK SGXT MOV PLOP3 P2R R2P '
           'CSET CSETP ISCADD IABS FCHK VOTE',
    'fma_heavy': 'IMAD IMUL IDP HFMA2 HADD2 HMUL2 HMNMX2 I2IP F2FP',
    'fma': 'FFMA FADD FMUL',
    'fp64': 'DFMA DADD DMUL DSETP',
    'xu': 'MUFU I2F F2I F2F I2I POPC FLO BREV FRND',
    'lsu': 'LDS STS LDG STG LD ST LDL STL LDC LDSM STSM ATOMS ATOMG ATOM RED SHFL MEMBAR LDGSTS LDGDEPBAR '
           'ULDC CCTL ERRBAR FENCE SYNCS UBLKCP UTMALDG UTMASTG',
    'tensor': 'HMMA IMMA HGMMA IGMMA BMMA DMMA WARPGROUP',
    'uniform': 'UMOV UIADD3 ULEA ULOP3 USHF UISETP USEL UPRMT S2UR R2UR UIMAD UFLO UPOPC UBMSK USGXT VOTEU',
    'control': 'BRA BRX JMP EXIT RET CALL BSSY BSYNC WARPSYNC BAR NOP YIELD NANOSLEEP S2R CS2R ELECT '
               'ACQBULK PREEXIT KILL BPT',
}
PIPE_OF = {op: pipe for pipe, ops in PIPES.items() for op in ops.split()}
PIPE_NAMES = list(PIPES) + ['other']

FUNC_NVDISASM = re.compile(r'^(\S+):\s*$')
FUNC_CUOBJDUMP = re.compile(r'^\s*Function\s*:\s*(\S+)')
LABEL = re.compile(r'^\s*(\.L_x_\d+|\.L_\w+):')
INSN = re.compile(r'^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')
BRANCH_NVDISASM = re.compile(r'\bBRA\b[^`]*`\(([^)]+)\)')
BRANCH_CUOBJDUMP = re.compile(r'\bBRA\b.*?\b0x([0-9a-f]+)\b')


def opcode(text):
    """Opcode of one instruction's text, predicate removed: 'IMAD.WIDE.U32'."""
    t = re.sub(r'^@!?U?P[T0-9]+\s+', '', text.strip())
    return t.split()[0] if t else ''


def pipe(op):
    return PIPE_OF.get(op.split('.')[0], 'other')


def parse(lines):
    """{kernel: (code, labels)}: code a list of (address, text, opcode), labels name -> address."""
    funcs = collections.OrderedDict()
    cur, pending = None, []
    for line in lines:
        m = FUNC_CUOBJDUMP.match(line)
        if not m and not line.startswith((' ', '\t', '.', '/')):
            m = FUNC_NVDISASM.match(line)
        if m:
            cur, pending = m.group(1), []
            funcs.setdefault(cur, ([], {}))
            continue
        if cur is None:
            continue
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSN.match(line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                funcs[cur][1][name] = addr
            pending = []
            funcs[cur][0].append((addr, m.group(2), opcode(m.group(2))))
    return funcs


PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
PTXAS_FRAME = re.compile(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads')
PTXAS_REGS = re.compile(r'Used (\d+) registers')


def parse_ptxas(lines):
    """[(kernel, registers, spill stores, spill loads, stack frame)] in the log's order."""
    out, cur = [], None
    for line in lines:
        m = PTXAS_ENTRY.search(line)
        if m:
            cur = [m.group(1), None, 0, 0, 0]
            out.append(cur)
            continue
        if cur is None:
            continue
        m = PTXAS_FRAME.search(line)
        if m:
            cur[4], cur[2], cur[3] = int(m.group(1)), int(m.group(2)), int(m.group(3))
        m = PTXAS_REGS.search(line)
        if m and cur[1] is None:
            cur[1] = int(m.group(1))
    return [tuple(k) for k in out]


def loops(code, labels):
    """(first, last, body) of every backward branch, in address order of the branch;
    body: the loop's opcodes."""
    out = []
    addrs = [a for a, _, _ in code]
    for i, (addr, text, _) in enumerate(code):
        m = BRANCH_NVDISASM.search(text)
        if m:
            target = labels.get(m.group(1))
        else:
            m = BRANCH_CUOBJDUMP.search(text)
            target = int(m.group(1), 16) if m else None
        if target is None or target > addr:
            continue
        body = [op for _, _, op in code[bisect.bisect_left(addrs, target):i + 1]]
        out.append((target, addr, body))
    return out


def mix(body):
    ops = collections.Counter(body)
    pipes = collections.Counter()
    for op, n in ops.items():
        pipes[pipe(op)] += n
    return ops, pipes


def demangle(names):
    """Demangled names through c++filt where it exists, else the names."""
    import shutil
    import subprocess
    if not names or not shutil.which('c++filt'):
        return {n: n for n in names}
    r = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True)
    out = [o.replace('(anonymous namespace)::', '') for o in r.stdout.split('\n')]
    return {n: (out[i] if i < len(out) and out[i] else n) for i, n in enumerate(names)}


def patch_elf(src, dst):
    d = bytearray(open(src, 'rb').read())
    if d[:4] != b'\x7fELF' or d[4] != 2:
        sys.exit('sass_loops: %s: not a 64-bit ELF file' % src)
    flags = struct.unpack_from('<I', d, 0x30)[0]
    if d[7] == 0x33:  # already the old layout
        open(dst, 'wb').write(d)
        return
    sm = (flags >> 8) & 0xff
    if d[7] != 0x41 or not 50 <= sm <= 0xff:
        sys.exit('sass_loops: %s: unknown cubin header (OS/ABI 0x%x, flags 0x%x)' % (src, d[7], flags))
    d[7], d[8] = 0x33, 7
    struct.pack_into('<I', d, 0x30, sm | 0x500 | sm << 16)
    open(dst, 'wb').write(d)


def picked(want, mangled, name):
    """Whether --kernel (empty: every kernel) is in the mangled or demangled name."""
    return not want or want in mangled or want in name


def write_csv(path, rows):
    """rows (dicts with the same keys) to path as CSV, the keys as its header."""
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def ptxas_main(a):
    try:
        kernels = parse_ptxas(open(a.ptxas).read().split('\n'))
    except OSError as e:
        sys.exit('sass_loops: %s: %s' % (a.ptxas, e.strerror))
    if not kernels:
        sys.exit('sass_loops: %s: no "Compiling entry function" line (not nvcc -Xptxas -v output?)' % a.ptxas)
    names = demangle([k[0] for k in kernels])
    rows = [collections.OrderedDict(kernel=names[k[0]], registers=k[1], spill_stores=k[2], spill_loads=k[3],
                                    stack=k[4]) for k in kernels if picked(a.kernel, k[0], names[k[0]])]
    if not rows:
        sys.exit('sass_loops: %s: no kernel matching %r' % (a.ptxas, a.kernel))
    if a.csv:
        write_csv(a.csv, rows)
    spilling = [r for r in rows if r['spill_stores'] or r['spill_loads']]
    print('%d kernels, registers %d - %d, %d spill' % (len(rows), min(r['registers'] or 0 for r in rows),
                                                      max(r['registers'] or 0 for r in rows), len(spilling)))
    for r in spilling:
        print('  spills %d / %d bytes, %d registers: %s' % (r['spill_stores'], r['spill_loads'], r['registers'],
                                                           r['kernel']))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument('listing', nargs='?', help='nvdisasm -c or cuobjdump -sass output ("-": stdin)')
    ap.add_argument('--kernel', default='', help='only kernels whose (mangled or demangled) name contains this')
    ap.add_argument('--min', type=int, default=16, help='only loops of at least this many instructions (16)')
    ap.add_argument('--csv', help='write one row per loop (pipes and totals) here')
    ap.add_argument('--opcodes', help='write one row per loop and opcode here')
    ap.add_argument('--ptxas', metavar='LOG', help='registers and spills per kernel from nvcc -Xptxas -v output')
    ap.add_argument('--patch-elf', nargs=2, metavar=('IN', 'OUT'), help='rewrite a CUDA 13 cubin header, then stop')
    a = ap.parse_args()
    if a.patch_elf:
        patch_elf(*a.patch_elf)
        return 0
    if a.ptxas:
        return ptxas_main(a)
    if not a.listing:
        ap.error('a listing is required')
    try:
        lines = (sys.stdin if a.listing == '-' else open(a.listing)).read().split('\n')
    except OSError as e:
        sys.exit('sass_loops: %s: %s' % (a.listing, e.strerror))
    funcs = parse(lines)
    if not funcs:
        sys.exit('sass_loops: %s: no kernel found (not nvdisasm -c or cuobjdump -sass output?)' % a.listing)
    names = demangle(list(funcs))
    rows, oprows, tops = [], [], []
    for mangled, (code, labels) in funcs.items():
        name = names[mangled]
        if not picked(a.kernel, mangled, name):
            continue
        found = loops(code, labels)
        for first, last, body in found:
            if len(body) < a.min:
                continue
            ops, pipes = mix(body)
            # innermost: no other loop inside its span
            inner = not any(first <= f2 and l2 <= last and (f2, l2) != (first, last) for f2, l2, _ in found)
            row = collections.OrderedDict(kernel=name, first='0x%x' % first, last='0x%x' % last,
                                          inner=int(inner), instructions=len(body))
            for p in PIPE_NAMES:
                row[p] = pipes.get(p, 0)
            row['cycles_bound'] = max(len(body), 2 * row['alu'], 2 * row['fma_heavy'])
            row['bound_by'] = ('issue' if row['cycles_bound'] == len(body)
                               else 'alu' if row['cycles_bound'] == 2 * row['alu'] else 'fma_heavy')
            rows.append(row)
            tops.append(ops.most_common(8))
            for op, n in ops.most_common():
                oprows.append(collections.OrderedDict(kernel=name, first=row['first'], last=row['last'], opcode=op,
                                                      pipe=pipe(op), count=n))
    if not rows:
        sys.exit('sass_loops: %s: no loop of >= %d instructions%s' %
                 (a.listing, a.min, ' in a kernel matching %r' % a.kernel if a.kernel else ''))
    for path, data in ((a.csv, rows), (a.opcodes, oprows)):
        if path:
            write_csv(path, data)
    cur = None
    for row, top in zip(rows, tops):
        if row['kernel'] != cur:
            cur = row['kernel']
            print(cur)
        print('  %s %s-%s: %d issued, alu %d, fma-heavy %d, lsu %d, tensor %d -> >= %d cycles (%s); %s' %
              ('inner loop' if row['inner'] else 'loop', row['first'], row['last'], row['instructions'],
               row['alu'], row['fma_heavy'], row['lsu'], row['tensor'], row['cycles_bound'], row['bound_by'],
               ' '.join('%s %d' % t for t in top)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
