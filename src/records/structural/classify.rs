//! Classifying 64 bytes at a time into bit masks, one bit per byte.
//!
//! Two instruction sets compute the same [`Block`], the operators and
//! whitespace from one table lookup per nibble: AVX-512 (one 64-byte
//! register, each class tested straight into a mask register) and AVX2
//! (two 32-byte halves, each mask gathered with `movemask`). A test holds
//! the two, and a plain byte loop, to the same masks on every byte value
//! at every position. AVX-512 (with VBMI and VBMI2) also turns a mask
//! into the list of its bits' offsets with one compress instead of a bit
//! at a time, and picks the bytes at those offsets with one permute.

/// The masks of one 64-byte block, bit `i` for byte `i`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Block {
    pub(super) quote: u64,
    pub(super) backslash: u64,
    /// Operators and separators.
    pub(super) operator: u64,
    /// Operators, separators and whitespace: what cannot be part of a
    /// number or literal.
    pub(super) delimiter: u64,
    pub(super) control: u64,
    pub(super) non_ascii: u64,
}

impl Block {
    /// The masks of `block` computed a byte at a time: the reference the
    /// vector classifiers are tested against.
    #[cfg(test)]
    pub(super) fn by_bytes(block: &[u8; 64]) -> Block {
        let mut m = Block::default();
        for (i, &b) in block.iter().enumerate() {
            let bit = 1u64 << i;
            let set = |mask: &mut u64, on: bool| {
                if on {
                    *mask |= bit
                }
            };
            let operator = b",:[]{}\n\x1e".contains(&b);
            set(&mut m.quote, b == b'"');
            set(&mut m.backslash, b == b'\\');
            set(&mut m.operator, operator);
            set(&mut m.delimiter, operator || b" \t\r".contains(&b));
            set(&mut m.control, b < 0x20);
            set(&mut m.non_ascii, b >= 0x80);
        }
        m
    }
}

/// Byte classes by nibble, for the AVX2 classification: byte `v` is in
/// class `c` when `low[v & 15] & high[v >> 4] & c != 0`. One bit per high
/// nibble and class, set in `high` for that nibble and in `low` for the
/// low nibbles of that class's members under it.
pub(super) struct NibbleClasses {
    pub(super) low: [u8; 16],
    pub(super) high: [u8; 16],
}

/// `,` (0x2c), `:` (0x3a), `[` `]` (0x5b, 0x5d), `{` `}` (0x7b, 0x7d).
pub(super) const OPERATOR: u8 = 0b0000_0111;
/// `\n` (0x0a), U+001E.
pub(super) const SEPARATOR: u8 = 0b0001_1000;
/// ` ` (0x20), `\t` (0x09), `\r` (0x0d).
pub(super) const WHITESPACE: u8 = 0b0110_0000;

pub(super) const NIBBLE_CLASSES: NibbleClasses = {
    // One bit per class and high nibble (5 and 7 share one: their
    // members have the same low nibbles), so no member's low nibble pairs
    // with another member's high nibble. Checked over all bytes by a test.
    const OP_2: u8 = 0b0000_0001; // `,` 0x2c
    const OP_3: u8 = 0b0000_0010; // `:` 0x3a
    const OP_57: u8 = 0b0000_0100; // `[` `]` `{` `}`: low nibbles b and d
    const SEP_0: u8 = 0b0000_1000; // `\n` 0x0a
    const SEP_1: u8 = 0b0001_0000; // U+001E 0x1e
    const WS_0: u8 = 0b0010_0000; // `\t` 0x09, `\r` 0x0d
    const WS_2: u8 = 0b0100_0000; // ` ` 0x20
    let mut low = [0u8; 16];
    let mut high = [0u8; 16];
    low[0xc] |= OP_2;
    low[0xa] |= OP_3 | SEP_0;
    low[0xb] |= OP_57;
    low[0xd] |= OP_57 | WS_0;
    low[0xe] |= SEP_1;
    low[0x9] |= WS_0;
    low[0x0] |= WS_2;
    high[0x0] = SEP_0 | WS_0;
    high[0x1] = SEP_1;
    high[0x2] = OP_2 | WS_2;
    high[0x3] = OP_3;
    high[0x5] = OP_57;
    high[0x7] = OP_57;
    NibbleClasses { low, high }
};

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::Block;
    use std::arch::x86_64::*;

    /// Classifies 64 bytes, 32 at a time.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(in super::super) fn classify(block: &[u8; 64]) -> Block {
        // SAFETY: both loads read 32 bytes inside the 64-byte block;
        // `loadu` has no alignment requirement.
        let (lo, hi) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().cast()),
                _mm256_loadu_si256(block.as_ptr().add(32).cast()),
            )
        };
        let eq = |v: __m256i, c: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c as i8));
        // Operators, separators and whitespace in one table lookup per
        // nibble: a byte is in a class when the bits its low and its high
        // nibble select share one of the class's bits. Each bit stands
        // for one high nibble's members of a class (see `NIBBLE_CLASSES`).
        // SAFETY: each load reads the 16 bytes of a 16-byte table.
        let (low_table, high_table) = unsafe {
            (
                _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    super::NIBBLE_CLASSES.low.as_ptr().cast(),
                )),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    super::NIBBLE_CLASSES.high.as_ptr().cast(),
                )),
            )
        };
        let nibbles = _mm256_set1_epi8(0x0f);
        let classes = |v: __m256i| {
            let low = _mm256_shuffle_epi8(low_table, _mm256_and_si256(v, nibbles));
            let high = _mm256_shuffle_epi8(
                high_table,
                _mm256_and_si256(_mm256_srli_epi16(v, 4), nibbles),
            );
            _mm256_and_si256(low, high)
        };
        let zero = _mm256_setzero_si256();
        let (class_lo, class_hi) = (classes(lo), classes(hi));
        let in_class = |bits: u8| {
            let set = _mm256_set1_epi8(bits as i8);
            !mask(
                _mm256_cmpeq_epi8(_mm256_and_si256(class_lo, set), zero),
                _mm256_cmpeq_epi8(_mm256_and_si256(class_hi, set), zero),
            )
        };
        // Unsigned v < 0x20 ⇔ min(v, 0x1f) == v.
        let control = |v: __m256i| _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1f)), v);
        Block {
            quote: mask(eq(lo, b'"'), eq(hi, b'"')),
            backslash: mask(eq(lo, b'\\'), eq(hi, b'\\')),
            operator: in_class(super::OPERATOR | super::SEPARATOR),
            delimiter: in_class(super::OPERATOR | super::SEPARATOR | super::WHITESPACE),
            control: mask(control(lo), control(hi)),
            non_ascii: mask(lo, hi),
        }
    }

    /// The top bits of two 32-byte halves as one 64-bit mask.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mask(lo: __m256i, hi: __m256i) -> u64 {
        let mut bits = u64::from(_mm256_movemask_epi8(lo) as u32)
            | u64::from(_mm256_movemask_epi8(hi) as u32) << 32;
        // An empty barrier: without it LLVM folds the masks' later
        // arithmetic back into byte vectors, and extracts them one byte
        // at a time (several times slower on AVX2).
        // SAFETY: the assembly is empty; it only hides the value.
        unsafe { std::arch::asm!("/* {0} */", inout(reg) bits, options(pure, nomem, nostack)) };
        bits
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::Block;
    use std::arch::x86_64::*;

    /// Classifies 64 bytes in one register, each class a compare into a
    /// mask.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    pub(in super::super) fn classify(block: &[u8; 64]) -> Block {
        // SAFETY: the load reads the 64 bytes of the block; `loadu` has no
        // alignment requirement.
        let v = unsafe { _mm512_loadu_si512(block.as_ptr().cast()) };
        let byte = |c: u8| _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(c as i8));
        // Operators, separators and whitespace in one table lookup per
        // nibble, as for AVX2 (see `NIBBLE_CLASSES`).
        // SAFETY: each load reads the 16 bytes of a 16-byte table.
        let (low_table, high_table) = unsafe {
            (
                _mm512_broadcast_i32x4(_mm_loadu_si128(super::NIBBLE_CLASSES.low.as_ptr().cast())),
                _mm512_broadcast_i32x4(_mm_loadu_si128(super::NIBBLE_CLASSES.high.as_ptr().cast())),
            )
        };
        let nibbles = _mm512_set1_epi8(0x0f);
        let classes = _mm512_and_si512(
            _mm512_shuffle_epi8(low_table, _mm512_and_si512(v, nibbles)),
            _mm512_shuffle_epi8(
                high_table,
                _mm512_and_si512(_mm512_srli_epi16(v, 4), nibbles),
            ),
        );
        let in_class = |bits: u8| _mm512_test_epi8_mask(classes, _mm512_set1_epi8(bits as i8));
        Block {
            quote: byte(b'"'),
            backslash: byte(b'\\'),
            operator: in_class(super::OPERATOR | super::SEPARATOR),
            delimiter: in_class(super::OPERATOR | super::SEPARATOR | super::WHITESPACE),
            control: _mm512_cmple_epu8_mask(v, _mm512_set1_epi8(0x1f)),
            non_ascii: _mm512_movepi8_mask(v),
        }
    }

    /// Writes the offsets of the set bits of `bits` (in `block`, at
    /// `base`) to the front of `out`, and their bytes as tokens to the
    /// front of `tokens`; both have room for 64. Returns how many. The
    /// bits' positions are compressed out of a vector of all 64, then
    /// widened and offset sixteen at a time; the bytes are picked from the
    /// block by the same positions, digits and `-` written as `0` first.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vbmi2")]
    #[inline]
    pub(in super::super) fn offsets(
        out: &mut [u32],
        tokens: &mut [u8],
        base: usize,
        block: &[u8; 64],
        bits: u64,
    ) -> usize {
        const POSITIONS: [u8; 64] = {
            let mut positions = [0u8; 64];
            let mut i = 0;
            while i < 64 {
                positions[i] = i as u8;
                i += 1;
            }
            positions
        };
        let out: &mut [u32; 64] = (&mut out[..64]).try_into().expect("64 slots");
        let tokens: &mut [u8; 64] = (&mut tokens[..64]).try_into().expect("64 slots");
        let count = bits.count_ones() as usize;
        // SAFETY: the loads read the 64 bytes of `POSITIONS` and of the
        // block; each store writes 16 slots of the 64 in `out`, or the 64
        // of `tokens`.
        unsafe {
            let v = _mm512_loadu_si512(block.as_ptr().cast());
            let number = _mm512_cmplt_epu8_mask(
                _mm512_sub_epi8(v, _mm512_set1_epi8(b'0' as i8)),
                _mm512_set1_epi8(10),
            ) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(b'-' as i8));
            let v = _mm512_mask_blend_epi8(number, v, _mm512_set1_epi8(b'0' as i8));
            let positions = _mm512_loadu_si512(POSITIONS.as_ptr().cast());
            let packed = _mm512_maskz_compress_epi8(bits, positions);
            _mm512_storeu_si512(
                tokens.as_mut_ptr().cast(),
                _mm512_permutexvar_epi8(packed, v),
            );
            let base = _mm512_set1_epi32(base as i32);
            let mut store = |at: usize, lane: __m128i| {
                let widened = _mm512_add_epi32(_mm512_cvtepu8_epi32(lane), base);
                _mm512_storeu_si512(out.as_mut_ptr().add(at).cast(), widened);
            };
            store(0, _mm512_castsi512_si128(packed));
            if count > 16 {
                store(16, _mm512_extracti32x4_epi32::<1>(packed));
                if count > 32 {
                    store(32, _mm512_extracti32x4_epi32::<2>(packed));
                    if count > 48 {
                        store(48, _mm512_extracti32x4_epi32::<3>(packed));
                    }
                }
            }
        }
        count
    }
}
