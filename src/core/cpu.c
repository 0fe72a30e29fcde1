// CPU detection for the kernel variants (ember_isa): CPUID for the instruction sets, XGETBV for
// the operating system's support of the wider register state, the brand string for records.
// Which variants exist in this build is decided by CMake (EMBER_HAVE_ISA_* definitions): a
// compiler without a variant's target flags, or another architecture, builds GENERIC only.
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define EMBER_X86 1
#endif

EMBER__ENUM_NAMES(ember_isa, ember_isa, "auto", "generic", "avx2", "avx512")

// What the CPU and OS offer, read once (the first caller fills it; the values never change, so
// two threads racing to fill it write the same bytes).
typedef struct cpu_info {
    int avx2, fma, f16c;                       // + OS saves YMM state
    int avx512f, avx512bw, avx512vl, avx512dq; // + OS saves ZMM and opmask state
    int avx512_fp16, avx512_bf16;              // reported only
    char name[64];
    char features[160];
} cpu_info;

#ifdef EMBER_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static void detect(cpu_info *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "unknown");
#ifdef EMBER_X86
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d)) return;
    const unsigned max_leaf = a;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return;
    const int osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1;
    const int fma = (cx >> 12) & 1, f16c = (cx >> 29) & 1;
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const int ymm_os = (xcr0 & 0x6) == 0x6;    // XMM and YMM state
    const int zmm_os = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, cx, d);
        const int avx2 = (b >> 5) & 1;
        c->avx2 = avx && avx2 && ymm_os;
        c->fma = fma && ymm_os;
        c->f16c = f16c && ymm_os;
        c->avx512f = ((b >> 16) & 1) && zmm_os;
        c->avx512dq = ((b >> 17) & 1) && zmm_os;
        c->avx512bw = ((b >> 30) & 1) && zmm_os;
        c->avx512vl = ((b >> 31) & 1) && zmm_os;
        c->avx512_fp16 = ((d >> 23) & 1) && zmm_os;
        unsigned a1 = 0, b1, c1, d1;
        if (a >= 1) __cpuid_count(7, 1, a1, b1, c1, d1);
        c->avx512_bf16 = ((a1 >> 5) & 1) && zmm_os;
    }
    unsigned brand[12];
    if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
        char s[49];
        memcpy(s, brand, 48);
        s[48] = '\0';
        const char *p = s;
        while (*p == ' ') p++;
        snprintf(c->name, sizeof c->name, "%s", p);
        for (size_t n = strlen(c->name); n > 0 && c->name[n - 1] == ' '; n--) c->name[n - 1] = '\0';
    }
    const struct { int have; const char *name; } flags[] = {
        {c->avx2, "avx2"},         {c->fma, "fma"},           {c->f16c, "f16c"},
        {c->avx512f, "avx512f"},   {c->avx512bw, "avx512bw"}, {c->avx512vl, "avx512vl"},
        {c->avx512dq, "avx512dq"}, {c->avx512_fp16, "avx512fp16"}, {c->avx512_bf16, "avx512bf16"},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!flags[i].have) continue;
        int k = snprintf(c->features + n, sizeof c->features - n, "%s%s", n ? " " : "", flags[i].name);
        if (k > 0 && (size_t)k < sizeof c->features - n) n += (size_t)k;
    }
#else
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            // x86 "model name", Arm "CPU part"/"Hardware", POWER "cpu": the first that appears.
            const char *keys[] = {"model name", "Hardware", "cpu\t"};
            for (size_t i = 0; i < 3; i++) {
                if (strncmp(line, keys[i], strlen(keys[i])) != 0) continue;
                const char *p = strchr(line, ':');
                if (!p) continue;
                for (p++; *p == ' '; p++) {}
                snprintf(c->name, sizeof c->name, "%s", p);
                c->name[strcspn(c->name, "\n")] = '\0';
                fclose(f);
                return;
            }
        }
        fclose(f);
    }
#endif
}

static const cpu_info *cpu(void) {
    static cpu_info c;
    static int done;
    if (!done) {
        cpu_info t;
        detect(&t);
        c = t;
        done = 1;
    }
    return &c;
}

const char *ember_cpu_name(void) { return cpu()->name; }
const char *ember_cpu_features(void) { return cpu()->features; }

int ember_isa_supported(ember_isa isa, char *why, size_t cap) {
    char tmp[8];
    if (!why) {
        why = tmp;
        cap = sizeof tmp;
    }
    if (cap) why[0] = '\0';
    const cpu_info *c = cpu();
    (void)c; // unused where no wide variant is built
    switch (isa) {
    case EMBER_ISA_GENERIC: return 1;
    case EMBER_ISA_AVX2:
#ifndef EMBER_HAVE_ISA_AVX2
        snprintf(why, cap, "this build has no avx2 kernels (compiler or architecture)");
        return 0;
#else
        if (c->avx2 && c->fma && c->f16c) return 1;
        snprintf(why, cap, "this CPU lacks%s%s%s", c->avx2 ? "" : " avx2", c->fma ? "" : " fma", c->f16c ? "" : " f16c");
        return 0;
#endif
    case EMBER_ISA_AVX512:
#ifndef EMBER_HAVE_ISA_AVX512
        snprintf(why, cap, "this build has no avx512 kernels (compiler or architecture)");
        return 0;
#else
        if (c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq) return 1;
        snprintf(why, cap, "this CPU lacks%s%s%s%s%s%s%s", c->avx2 ? "" : " avx2", c->fma ? "" : " fma",
                 c->f16c ? "" : " f16c", c->avx512f ? "" : " avx512f", c->avx512bw ? "" : " avx512bw",
                 c->avx512vl ? "" : " avx512vl", c->avx512dq ? "" : " avx512dq");
        return 0;
#endif
    case EMBER_ISA_AUTO: return 1;
    }
    snprintf(why, cap, "unknown variant %d", (int)isa);
    return 0;
}

ember_isa ember_isa_best(void) {
    for (int i = EMBER_ISA_COUNT - 1; i > EMBER_ISA_GENERIC; i--)
        if (ember_isa_supported((ember_isa)i, NULL, 0)) return (ember_isa)i;
    return EMBER_ISA_GENERIC;
}
