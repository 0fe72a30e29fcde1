// `ember bench <name> [options]`: dispatch to the benchmarks in bench/.
#include <stdio.h>
#include <string.h>

#include "ckpt_bench.h"
#include "commands.h"
#include "dense_bench.h"
#include "quant_bench.h"
#include "shard_bench.h"
#include "tbe_bench.h"

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: ember bench tbe [options]     local kernels vs the gather limit (--help)\n"
                "       mpiexec -n W ember bench shard [options]   bytes and time per step of each scheme\n"
                "       mpiexec -n W ember bench ckpt [options]    checkpoint save and load throughput\n"
                "       ember bench dense [options]   DLRM/DCN dense products vs OpenBLAS and the FMA peak (--help)\n"
                "       ember bench reader --data_dir DIR   rows/s of the criteo_npy day-file reader (--help)\n"
                "       ember bench quant [options]   quantized tables' forward vs the gather limit and fp32 (--help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "tbe")) return tbe_bench_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "shard")) return shard_bench_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "ckpt")) return ckpt_bench_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "dense")) return dense_bench_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reader")) return reader_bench_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quant")) return quant_bench_main(argc - 1, argv + 1);
    fprintf(stderr, "ember bench: unknown benchmark '%s' (known: tbe, shard, ckpt, dense, reader, quant)\n", argv[1]);
    return 2;
}
