#!/usr/bin/env python3
"""Write a quant_tables.h whose trellis codebook is an additive byte table
(a candidate for a dp2a decode, experiments/kernels/README.md, "Additive
byte-table codebooks"): the value of a 12-bit window w is

    h = (w * A) >> 12 (mod 2^32)          IMAD.HI of w << 20 by QTIP's 1MAD multiplier
    f = L[h & m] + L[(h >> 4) & m] + ...  TERMS fields of BITS bits, a nibble apart

the sum of TERMS entries of the table L (one PRMT of an 8-byte table gives
four such bytes for BITS = 3, a dp2a adds two of them times an activation).
Only for the encoder and the reference decoder (bench_quant): the file has
the table and its RMS, not the GPU constants of format version 2.

    lut_codebook.py TERMS BITS L0,L1,... > quant_tables.h

or an fp16 bit-mask codebook (a candidate for a decode of ~2 instructions a
weight after the window extraction: the hash's IMAD, half a PRMT that pairs
two hashes' high halves, half a LOP3 that masks the pair into two fp16
values; experiments/kernels/README.md, "item 1's x1.4 against its own
conditions"):

    h = w * A + B (mod 2^32)               the format's 1MAD hash
    f = fp16 bits ((h >> 16) & MASK)        sign, the exponent bits MASK keeps, mantissa

    lut_codebook.py mask MASK > quant_tables.h
"""
import math
import struct
import sys

from gen_tables import A, B, S  # the format's 1MAD hash constants, 4096 windows


def table(terms, bits, lut):
    m = (1 << bits) - 1
    out = []
    for w in range(S):
        h = ((w << 20) * A) >> 32 & 0xFFFFFFFF
        out.append(float(sum(lut[(h >> (4 * j)) & m] for j in range(terms))))
    return out


def mask_table(mask):
    out = []
    for w in range(S):
        h = (w * A + B) & 0xFFFFFFFF
        out.append(struct.unpack('<e', struct.pack('<H', (h >> 16) & mask))[0])
    if not all(math.isfinite(v) for v in out):
        sys.exit('lut_codebook.py: mask 0x%x keeps exponent bits that reach inf/NaN' % mask)
    return out


def main():
    if len(sys.argv) == 3 and sys.argv[1] == 'mask':
        mask = int(sys.argv[2], 0)
        if not 0 < mask <= 0xFFFF:
            sys.exit('lut_codebook.py: MASK is a 16-bit fp16 bit mask, e.g. 0x8fff')
        t = mask_table(mask)
        emit(t, 'mask 0x%04x' % mask)
        return
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    terms, bits = int(sys.argv[1]), int(sys.argv[2])
    lut = [float(v) for v in sys.argv[3].split(',')]
    if len(lut) != 1 << bits or not 1 <= terms <= 4:
        sys.exit('lut_codebook.py: want 2^BITS table entries and 1 - 4 terms')
    emit(table(terms, bits, lut), '%d %d %s' % (terms, bits, sys.argv[3]))


def emit(t, what):
    bulk = sorted(t, key=abs)[:S - S // 100]
    rms = math.sqrt(sum(v * v for v in bulk) / len(bulk))
    o = sys.stdout
    o.write('/* lut_codebook.py %s */\n' % what)
    o.write('#ifndef STRATA_QUANT_TABLES_H\n#define STRATA_QUANT_TABLES_H\n')
    o.write('#define STRATA_TCQ_TABLE_SIZE %d\n#define STRATA_TCQ_TABLE_RMS %.9gf\n' % (S, rms))
    o.write('static const float strata_tcq_table[STRATA_TCQ_TABLE_SIZE] = {\n')
    o.write(',\n'.join(repr(v) + 'f' for v in t))
    o.write('\n};\n#endif\n')


if __name__ == '__main__':
    main()
