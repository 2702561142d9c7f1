"""Where the float32 ``erf``'s coefficients come from, and the sweep that bounds its error.

``executors/builtin/elementwise.py`` computes erf of float32 values in
float32 (``_host_erf32``) in the form of N. Juffa's erff:

* ``|x| <= 0.921875``: ``erf(x) = x + x P(x^2)``, P of degree 5;
* above: ``erf(x) = sign(x) (1 - exp(t (Q(t) - 1)))``, ``t = min(|x|, 4)``,
  Q of degree 5.

This script fits P and Q again (Lawson's iteratively reweighted least
squares, near-minimax, on 4,001 Chebyshev nodes; P against Cody's float64
erf, the relative error; Q against mpmath's erfc, the error of the
exponent weighted by erfc, which is the absolute error it makes in erf),
prints them beside the module's, and then sweeps every STEP-th positive
float32 from the smallest normal to 6, both signs, counting the ulps
between the module's result and the correctly rounded one (Cody's float64
erf rounded to float32; it is within a few float64 ulps of the C library's,
far below a float32 half ulp).

    python bench/erf32_fit.py            # STEP 7: about 150 M values a sign, a minute or two
    python bench/erf32_fit.py --step 97  # a quick look

2026-12-05: P's relative error 1.5e-8, Q's weighted error 2.9e-9; over
every 7th float32 of both signs, at most 1 ulp from the correctly rounded
value, 83 % equal.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

SPLIT = 0.921875


def lawson(x: np.ndarray, f: np.ndarray, weight: np.ndarray, degree: int, iterations: int = 60):
    """Coefficients (lowest first) of the polynomial of ``degree`` nearest ``f`` in the weighted max norm, and
    that norm: least squares reweighted by each node's error (Lawson), which tends to the minimax fit."""
    a = np.stack([x ** k for k in range(degree + 1)], axis=1)
    lw = np.full(x.shape, 1.0 / x.size)
    for _ in range(iterations):
        root = np.sqrt(lw) * weight
        c = np.linalg.lstsq(a * root[:, None], f * root, rcond=None)[0]
        error = np.abs(a @ c - f) * weight
        lw = lw * error
        lw /= lw.sum()
    return c, float(error.max())


def chebyshev(lo: float, hi: float, n: int = 4001) -> np.ndarray:
    return (np.cos(np.linspace(0, np.pi, n)) + 1) * (hi - lo) / 2 + lo


def fit() -> tuple[np.ndarray, float, np.ndarray, float]:
    import mpmath

    from hetflow.executors.builtin.elementwise import _host_erf

    a = chebyshev(0.0, SPLIT) + 1e-6
    a = a[a > 1e-4]  # erf(a) / a - 1 loses its digits to cancellation near 0, where P(0) = 2 / sqrt(pi) - 1 holds it
    p, p_error = lawson(a * a, _host_erf(a) / a - 1, np.ones_like(a), 5)
    t = chebyshev(SPLIT, 4.0)
    erfc = np.array([float(mpmath.erfc(v)) for v in t])
    q, q_error = lawson(t, 1 + np.log(erfc) / t, erfc * t, 5)
    return p, p_error, q, q_error


def sweep(step: int) -> tuple[int, float]:
    """(the most ulps, the share equal) of the module's float32 erf over every ``step``-th float32 in
    [2^-126, 6], both signs, in slices so the memory stays small."""
    from hetflow.executors.builtin.elementwise import _host_erf, _host_erf32

    worst, equal, total = 0, 0, 0
    for start in range(0x00800000, 0x40C00000, step * (1 << 22)):
        bits = np.arange(start, min(start + step * (1 << 22), 0x40C00000), step, dtype=np.uint32)
        for x in (bits.view(np.float32), -bits.view(np.float32)):
            want = _host_erf(x.astype(np.float64)).astype(np.float32)
            ulps = np.abs(_host_erf32(x).view(np.int32).astype(np.int64) - want.view(np.int32))
            worst, equal, total = max(worst, int(ulps.max())), equal + int((ulps == 0).sum()), total + x.size
    return worst, equal / total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, default=7, help="sweep every STEP-th float32 (default 7)")
    args = parser.parse_args(argv)
    try:
        import mpmath  # noqa: F401 - fit() takes erfc from it: 1 - erf in float64 cancels erfc's digits near 4
    except ImportError:
        print("erf32_fit.py needs mpmath for the reference erfc: pip install mpmath", file=sys.stderr)
        return 2
    from hetflow.executors.builtin import elementwise

    p, p_error, q, q_error = fit()
    print(f"P (relative error {p_error:.2g}): {list(map(float, p))}")
    print(f"   the module's:              {list(map(float, elementwise._ERF32_P))}")
    print(f"Q (weighted error {q_error:.2g}): {list(map(float, q))}")
    print(f"   the module's:              {list(map(float, elementwise._ERF32_Q))}")
    same = [np.float32(c) for c in p] == list(elementwise._ERF32_P) and [np.float32(c) for c in q] == list(
        elementwise._ERF32_Q)
    print("rounded to float32, the fits " + ("are the module's coefficients" if same else "differ from the module's"))
    worst, equal = sweep(args.step)
    print(f"every {args.step}th float32 in [2^-126, 6], both signs: at most {worst} ulp, {100 * equal:.1f} % equal")
    return 0 if worst <= 1 and same else 1


if __name__ == "__main__":
    sys.exit(main())
