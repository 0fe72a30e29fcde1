// Naive reference for the OCP 8-bit floats (E4M3 when e5m2 = 0, E5M2 otherwise), written from
// the format's definition with double arithmetic and a search over every code; shares no code
// with src/.
#ifndef EMBER_TEST_FP8_ORACLE_H
#define EMBER_TEST_FP8_ORACLE_H

// The value of code h: (-1)^s 2^(e - bias) (1 + m / 2^mb), or (-1)^s 2^(1 - bias) m / 2^mb for
// e = 0; NAN for the NaN codes, +-INFINITY for E5M2's infinities.
double fp8_oracle_value(unsigned h, int e5m2);
// Finite x rounded to the nearest finite value (a tie to the code with an even mantissa), its
// sign kept for zero; *overflow = 1 (and the result meaningless) when x is nearer the first
// value past the largest finite (or ties with it and that one is even), as IEEE rounding does.
double fp8_oracle_round(double x, int e5m2, int *overflow);

#endif
