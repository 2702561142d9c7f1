// Conversions between the packed storage of each hetflow dtype and the two
// 32-bit words kernels compute in, f32 and i32, in integer arithmetic on
// the bits: WGSL leaves the rounding of float conversions to the
// implementation and lets it assume there is no NaN or infinity, so this
// code never relies on either. The results match numpy/ml_dtypes bit for
// bit, following hetflow's numeric rule: floats round to nearest even
// (numpy's NaN payloads for fp16, canonical NaNs for bf16 and fp8); the
// quantized int8/int4 round to nearest even and saturate; the integers take
// a float toward zero, saturating (NaN becomes 0), and another integer by
// wrapping; bool is value != 0.

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

// A nonzero magnitude u rounded to a float of MB mantissa bits and
// exponent bias BIAS, once, to nearest even (ml_dtypes converts an integer
// to bf16 or fp8 directly, not through f32). OVF and OVF_VALUE as above.
fn u32_to_small(u: u32, MB: u32, BIAS: u32, OVF: u32, OVF_VALUE: u32) -> u32 {
    var e = 31u - countLeadingZeros(u);
    var m = 0u;
    if (e <= MB) {
        m = u << (MB - e);
    } else {
        let shift = e - MB;
        m = u >> shift;
        let rem = u & ((1u << shift) - 1u);
        let half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (m & 1u) == 1u)) { m = m + 1u; }
        if (m == (2u << MB)) {
            m = m >> 1u;
            e = e + 1u;
        }
    }
    if (e + BIAS >= 255u) { return OVF_VALUE; }
    let h = ((e + BIAS) << MB) | (m & ((1u << MB) - 1u));
    if (h >= OVF) { return OVF_VALUE; }
    return h;
}

fn i32_to_float(v: i32, MB: u32, BIAS: u32, OVF: u32, OVF_VALUE: u32, SIGN: u32) -> u32 {
    if (v == 0) { return 0u; }
    // the magnitude as u32: 0 - bits is right for i32's minimum too
    let u = select(bitcast<u32>(v), 0u - bitcast<u32>(v), v < 0);
    return select(0u, SIGN, v < 0) | u32_to_small(u, MB, BIAS, OVF, OVF_VALUE);
}

fn i32_to_f32(v: i32) -> f32 {
    return bitcast<f32>(i32_to_float(v, 23u, 127u, 0x7f800000u, 0x7f800000u, 0x80000000u));
}

// f32 toward zero, saturating at [lo, top - 1] (top = the type's max + 1,
// exact in f32 for every target); NaN becomes 0.
fn f32_to_int_trunc(b: u32, lo: f32, top: f32, ilo: i32, ihi: i32) -> i32 {
    if (f32_is_nan(b)) { return 0; }
    if ((b & 0x7fffffffu) == 0x7f800000u) { return select(ihi, ilo, (b & 0x80000000u) != 0u); }
    let x = bitcast<f32>(b);
    if (x >= top) { return ihi; }
    if (x < lo) { return ilo; }
    return i32(trunc(x));
}

// The value of an i32 word after wrapping it to the integer type CT:
// 7 int16, 8 int32, 9 uint8, 10 bool, 5 int8, 6 int4 (anything else as is).
fn wrap_i32(v: i32, ct: u32) -> i32 {
    switch ct {
        case 5u: { return (v << 24u) >> 24u; }
        case 6u: { return (v << 28u) >> 28u; }
        case 7u: { return (v << 16u) >> 16u; }
        case 9u: { return v & 0xff; }
        case 10u: { return select(0, 1, v != 0); }
        default: { return v; }
    }
}

// DT codes: 0 fp32, 1 fp16, 2 bf16, 3 fp8e4m3, 4 fp8e5m2, 5 int8, 6 int4,
// 7 int16, 8 int32, 9 uint8, 10 bool
fn decode_i32(h: u32, dt: u32) -> i32 {
    switch dt {
        case 5u: { return bitcast<i32>(h << 24u) >> 24u; }
        case 6u: { return bitcast<i32>(h << 28u) >> 28u; }
        case 7u: { return bitcast<i32>(h << 16u) >> 16u; }
        case 9u: { return i32(h & 0xffu); }
        case 10u: { return select(0, 1, (h & 0xffu) != 0u); }
        default: { return bitcast<i32>(h); }
    }
}

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
        default: { return i32_to_f32(decode_i32(h, dt)); }
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
        case 6u: { return u32(f32_to_int(b, -8, 7)) & 0xfu; }
        case 7u: { return u32(f32_to_int_trunc(b, -32768.0, 32768.0, -32768, 32767)) & 0xffffu; }
        case 8u: { return bitcast<u32>(f32_to_int_trunc(b, -2147483648.0, 2147483648.0, -2147483647 - 1, 2147483647)); }
        case 9u: { return u32(f32_to_int_trunc(b, 0.0, 256.0, 0, 255)); }
        default: { return select(0u, 1u, (b & 0x7fffffffu) != 0u); }
    }
}

// An integer computed as an i32 word into dtype dt: floats round once, to
// nearest even; int8/int4 saturate (the quantization rule); the integers wrap.
fn encode_i32(v: i32, dt: u32) -> u32 {
    switch dt {
        case 0u: { return bitcast<u32>(i32_to_f32(v)); }
        case 1u: { return i32_to_float(v, 10u, 15u, 0x7c00u, 0x7c00u, 0x8000u); }
        case 2u: { return i32_to_float(v, 7u, 127u, 0x7f80u, 0x7f80u, 0x8000u); }
        case 3u: { return i32_to_float(v, 3u, 7u, 0x7fu, 0x7fu, 0x80u); }
        case 4u: { return i32_to_float(v, 2u, 15u, 0x7cu, 0x7cu, 0x80u); }
        case 5u: { return u32(clamp(v, -128, 127)) & 0xffu; }
        case 6u: { return u32(clamp(v, -8, 7)) & 0xfu; }
        case 7u: { return bitcast<u32>(v) & 0xffffu; }
        case 9u: { return bitcast<u32>(v) & 0xffu; }
        case 10u: { return select(0u, 1u, v != 0); }
        default: { return bitcast<u32>(v); }
    }
}
