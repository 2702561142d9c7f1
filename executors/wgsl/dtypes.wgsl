// Conversions between f32 and the packed storage of each hetflow dtype,
// in integer arithmetic on the bits: WGSL leaves the rounding of float
// conversions to the implementation and lets it assume there is no NaN or
// infinity, so this code never relies on either. The results match
// numpy/ml_dtypes bit for bit: round to nearest even, numpy's NaN
// payloads for fp16, canonical NaNs for bf16 and fp8, saturation for ints.

fn f32_is_nan(b: u32) -> bool {
    return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u;
}

// Round the f32 with bits b to a float of MB mantissa bits and exponent
// bias BIAS. OVF is the first encoding past the largest finite value and
// OVF_VALUE what an overflow becomes (infinity, or NaN for e4m3fn).
fn f32_to_small(b: u32, MB: u32, BIAS: i32, OVF: u32, OVF_VALUE: u32, NAN: u32, SIGN: u32) -> u32 {
    let sign = select(0u, SIGN, (b & 0x80000000u) != 0u);
    let e32 = (b >> 23u) & 0xffu;
    let m32 = b & 0x007fffffu;
    if (e32 == 0xffu) {
        if (m32 != 0u) { return sign | NAN; }
        return sign | OVF_VALUE;
    }
    let drop = 23u - MB;
    let e = i32(e32) - 127 + BIAS;
    if (e >= 1) {
        if (e > 64) { return sign | OVF_VALUE; }
        var h = (u32(e) << MB) | (m32 >> drop);
        let rem = m32 & ((1u << drop) - 1u);
        let half = 1u << (drop - 1u);
        if (rem > half || (rem == half && (h & 1u) == 1u)) { h = h + 1u; }
        if (h >= OVF) { return sign | OVF_VALUE; }
        return sign | h;
    }
    if (e32 == 0u) { return sign; }  // f32 subnormals are far below every target's range
    let shift = drop + u32(1 - e);
    if (shift > 24u) { return sign; }
    let mant = m32 | 0x00800000u;
    var h = mant >> shift;
    let rem = mant & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u) == 1u)) { h = h + 1u; }
    return sign | h;
}

fn f32_to_f16(b: u32) -> u32 {
    if (f32_is_nan(b)) {
        // numpy keeps the top payload bits and makes sure it stays a NaN
        var h = 0x7c00u | ((b & 0x007fffffu) >> 13u);
        if (h == 0x7c00u) { h = h + 1u; }
        return ((b >> 16u) & 0x8000u) | h;
    }
    return f32_to_small(b, 10u, 15, 0x7c00u, 0x7c00u, 0x7e00u, 0x8000u);
}

fn f32_to_bf16(b: u32) -> u32 {
    if (f32_is_nan(b)) { return ((b >> 16u) & 0x8000u) | 0x7fc0u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn f32_to_int(b: u32, lo: i32, hi: i32) -> i32 {
    if (f32_is_nan(b)) { return 0; }
    if ((b & 0x7fffffffu) == 0x7f800000u) { return select(hi, lo, (b & 0x80000000u) != 0u); }
    // round() is half-to-even in WGSL; clamping first keeps the i32 conversion in range
    return i32(clamp(round(bitcast<f32>(b)), f32(lo), f32(hi)));
}

fn small_to_f32(h: u32, MB: u32, EB: u32, BIAS: u32, FN: bool) -> f32 {
    let sign = (h >> (MB + EB)) << 31u;
    let e = (h >> MB) & ((1u << EB) - 1u);
    let m = h & ((1u << MB) - 1u);
    let top = (1u << EB) - 1u;
    if (FN) {
        if (e == top && m == (1u << MB) - 1u) { return bitcast<f32>(sign | 0x7fc00000u); }
    } else if (e == top) {
        return bitcast<f32>(sign | 0x7f800000u | (m << (23u - MB)));
    }
    if (e == 0u) {
        if (m == 0u) { return bitcast<f32>(sign); }
        var ee = 127u - BIAS + 1u;
        var mm = m;
        loop {
            if ((mm & (1u << MB)) != 0u) { break; }
            mm = mm << 1u;
            ee = ee - 1u;
        }
        return bitcast<f32>(sign | (ee << 23u) | ((mm & ((1u << MB) - 1u)) << (23u - MB)));
    }
    return bitcast<f32>(sign | ((e + 127u - BIAS) << 23u) | (m << (23u - MB)));
}

// DT codes: 0 fp32, 1 fp16, 2 bf16, 3 fp8e4m3, 4 fp8e5m2, 5 int8, 6 int4
fn decode_bits(h: u32, dt: u32) -> f32 {
    switch dt {
        case 0u: { return bitcast<f32>(h); }
        case 1u: { return small_to_f32(h, 10u, 5u, 15u, false); }
        case 2u: { return bitcast<f32>(h << 16u); }
        case 3u: { return small_to_f32(h, 3u, 4u, 7u, true); }
        case 4u: {
            // ml_dtypes widens every e5m2 NaN to the canonical quiet NaN
            if ((h & 0x7cu) == 0x7cu && (h & 3u) != 0u) { return bitcast<f32>(((h & 0x80u) << 24u) | 0x7fc00000u); }
            return small_to_f32(h, 2u, 5u, 15u, false);
        }
        case 5u: { return f32(bitcast<i32>(h << 24u) >> 24u); }
        default: { return f32(bitcast<i32>(h << 28u) >> 28u); }
    }
}

fn encode_bits(b: u32, dt: u32) -> u32 {
    switch dt {
        case 0u: { return b; }
        case 1u: { return f32_to_f16(b); }
        case 2u: { return f32_to_bf16(b); }
        case 3u: { return f32_to_small(b, 3u, 7, 0x7fu, 0x7fu, 0x7fu, 0x80u); }
        case 4u: { return f32_to_small(b, 2u, 15, 0x7cu, 0x7cu, 0x7eu, 0x80u); }
        case 5u: { return u32(f32_to_int(b, -128, 127)) & 0xffu; }
        default: { return u32(f32_to_int(b, -8, 7)) & 0xfu; }
    }
}
