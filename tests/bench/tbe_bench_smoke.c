// Smoke test of the TBE benchmark (tests/bench.cmake): runs `ember bench tbe` cases once at a
// tiny size. The exit status says whether every residual against the naive reference is within
// tolerance (0), one is not (1), or something failed (2); the timings are not looked at.
#include "isa_env.h"
#include "tbe_bench.h"

int main(int argc, char **argv) {
    const int skip = test_isa_env_check("bench.tbe");
    return skip ? skip : tbe_bench_main(argc, argv);
}
