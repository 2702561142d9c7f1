// Float functions WGSL lacks or leaves undefined where numpy defines them,
// for the unary and binary kernels' expressions.

// erf to about 1.2e-7: Taylor's series near 0, where its relative error
// matters, else 1 - erfc by the Chebyshev fit of Numerical Recipes (erfcc).
fn erf_f32(x: f32) -> f32 {
    let z = abs(x);
    if (z < 0.5) {
        let q = x * x;
        return 1.1283791670955126 * x * (1.0 + q * (-1.0 / 3.0 + q * (0.1 + q * (-1.0 / 42.0 + q * (1.0 / 216.0 + q * (-1.0 / 1320.0))))));
    }
    if (z >= 4.0) { return sign(x); }
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return sign(x) * (1.0 - r);
}

fn is_nan_f32(x: f32) -> bool {
    let b = bitcast<u32>(x);
    return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u;
}

// Subnormal arguments: lavapipe's log2 and exp2 take every subnormal for
// about 2^-127 (log(1e-40) came out as -88.0, not -92.1; pow(1e-40, -1) as
// 1.7e38, not inf; exp(-1e-40) as 0.99999994), so a subnormal is scaled by
// 2^64 into the normal range first. A device that flushes subnormals to
// zero gives zero's results instead (-inf, inf, 1), which the docs allow.
const TINY_F32: f32 = 1.17549435e-38;  // the smallest normal f32

// log2 of m >= 0
fn log2_f32(m: f32) -> f32 {
    if (m < TINY_F32) { return log2(m * 18446744073709551616.0) - 64.0; }
    return log2(m);
}

fn log_f32(x: f32) -> f32 {
    if (x > 0.0 && x < TINY_F32) { return log(x * 18446744073709551616.0) - 44.3614195558365; }
    return log(x);
}

// e^x is 1 in f32 for any |x| below 2^-25
fn exp_f32(x: f32) -> f32 {
    if (abs(x) < 2.9802322e-8) { return 1.0; }
    return exp(x);
}

// numpy's power for floats, C's powf: WGSL's pow is undefined for a
// negative base, and its exp2(b * log2(a)) gets C's special values wrong.
// C11 F.10.4.4: "pow(x, +-0) returns 1 for any x, even a NaN"; "pow(+1, y)
// returns 1 for any y, even a NaN"; "pow(-1, +-inf) returns 1"; a zero or
// infinite base, or an infinite exponent, keeps the sign of the base only
// for an odd integer exponent; a finite negative base with a finite
// non-integer exponent gives NaN.
fn pow_f32(a: f32, b: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u);
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (is_nan_f32(a) || is_nan_f32(b)) { return bitcast<f32>(0x7fc00000u); }
    let half = b * 0.5;
    let odd = floor(b) == b && floor(half) != half;
    let m = abs(a);
    if (abs(b) == inf) {
        if (m == 1.0) { return 1.0; }
        return select(0.0, inf, (m > 1.0) == (b > 0.0));
    }
    if (m == 0.0 || m == inf) {
        let big = (m == inf) == (b > 0.0);
        let r = select(0.0, inf, big);
        return select(r, -r, odd && (bitcast<u32>(a) & 0x80000000u) != 0u);
    }
    if (b == 1.0) { return a; }
    if (b == 2.0) { return a * a; }
    let p = exp2(b * log2_f32(m));
    if (a > 0.0) { return p; }
    if (floor(b) != b) { return bitcast<f32>(0x7fc00000u); }
    return select(p, -p, odd);
}

// tanh that stays finite where exp overflows (tanh(15) is 1 in f32), NaN
// staying NaN (clamp of a NaN is undefined in WGSL), and near 0 by its
// Taylor series: lavapipe's tanh, (e^2x - 1) / (e^2x + 1), loses every
// digit there (tanh(1e-30) came out as 2.98e-8). Below 0.25 the series
// to x^9 is within 2e-9 relative.
fn tanh_f32(x: f32) -> f32 {
    if (is_nan_f32(x)) { return x; }
    if (abs(x) < 0.25) {
        let q = x * x;
        return x * (1.0 + q * (-1.0 / 3.0 + q * (2.0 / 15.0 + q * (-17.0 / 315.0 + q * (62.0 / 2835.0)))));
    }
    return tanh(clamp(x, -15.0, 15.0));
}

// 1 / (1 + e^-x) without overflowing exp for very negative x
fn sigmoid_f32(x: f32) -> f32 {
    let e = exp_f32(-abs(x));
    return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}

// numpy's maximum and minimum: a NaN operand wins (WGSL's max and min may
// return either operand then)
fn max_f32(a: f32, b: f32) -> f32 {
    if (is_nan_f32(a)) { return a; }
    if (is_nan_f32(b)) { return b; }
    return max(a, b);
}

fn min_f32(a: f32, b: f32) -> f32 {
    if (is_nan_f32(a)) { return a; }
    if (is_nan_f32(b)) { return b; }
    return min(a, b);
}

fn relu_f32(x: f32) -> f32 {
    return max_f32(x, 0.0);
}

// clip as the CPU body: maximum with the lower bound, then minimum with the
// upper (so min above max gives max), NaN staying NaN
fn clip_f32(x: f32, lo: f32, hi: f32) -> f32 {
    return min_f32(max_f32(x, lo), hi);
}

// GELU: the tanh approximation (erf_form 0) or the exact x * Phi(x) with erf
fn gelu_f32(x: f32, erf_form: f32) -> f32 {
    if (erf_form != 0.0) { return 0.5 * x * (1.0 + erf_f32(x * 0.7071067811865476)); }
    return 0.5 * x * (1.0 + tanh_f32(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
