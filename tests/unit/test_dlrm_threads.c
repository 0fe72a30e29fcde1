// `ember train`'s thread placement (apps/ember/threads.h): which CPUs the threads of each rank of
// a host get, on made-up hosts (SMT, two sockets, fewer CPUs than threads), CPU lists, cgroup CPU
// quotas, the default thread count and the oversubscription warning.
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "threads.h"

enum { MAX_CPUS = 64, MAX_RANKS = 8 };

typedef struct host {
    int32_t n;
    threads_cpu cpus[MAX_CPUS];
} host;

// `packages` packages of `cores` cores with `smt` hardware threads each, numbered as Linux does
// on most x86 hosts: the first hardware thread of every core first, package after package, then
// the second ones (CPU c and c + packages * cores are siblings).
static host make_host(int32_t packages, int32_t cores, int32_t smt) {
    host h = {0};
    for (int32_t t = 0; t < smt; t++) {
        for (int32_t p = 0; p < packages; p++) {
            for (int32_t c = 0; c < cores; c++) {
                h.cpus[h.n] = (threads_cpu){.id = h.n, .package = p, .core = c};
                h.n++;
            }
        }
    }
    return h;
}

// Runs the assignment with rank r allowed on the CPU ids in masks[r] (a CPU list, "" for all)
// and writes rank r's chosen CPU ids as a list into got[r]. Returns the most threads per CPU.
static int32_t assign(const host *h, int32_t nranks, const char *const *masks, const int32_t *want,
                      char got[][128]) {
    uint8_t allowed[MAX_RANKS * MAX_CPUS] = {0};
    int32_t pick[MAX_RANKS * MAX_CPUS], ids[MAX_CPUS];
    for (int32_t r = 0; r < nranks; r++) {
        int32_t n = masks[r][0] ? threads_parse_cpu_list(masks[r], ids, MAX_CPUS) : 0;
        assert_true(n >= 0);
        for (int32_t i = 0; i < h->n; i++) {
            bool in = n == 0;
            for (int32_t k = 0; k < n; k++) in |= ids[k] == h->cpus[i].id;
            allowed[r * h->n + i] = in;
        }
    }
    int32_t most = threads_assign(h->n, h->cpus, nranks, allowed, want, pick);
    for (int32_t r = 0, off = 0; r < nranks; r++) {
        // As a sorted list: the order of a rank's CPUs is the order of its threads, checked apart.
        int32_t sorted[MAX_CPUS];
        for (int32_t t = 0; t < want[r]; t++) sorted[t] = h->cpus[pick[off + t]].id;
        for (int32_t i = 1; i < want[r]; i++) {
            for (int32_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                int32_t x = sorted[j];
                sorted[j] = sorted[j - 1];
                sorted[j - 1] = x;
            }
        }
        threads_format_cpu_list(sorted, want[r], got[r], 128);
        off += want[r];
    }
    return most;
}

static void one_rank_bound_to_one_core_grows_to_the_host(void **state) {
    (void)state;
    // mpiexec -n 1 binds the rank to core 0; --threads 2 on a 2-core host.
    host h = make_host(1, 2, 1);
    char got[1][128];
    assert_int_equal(assign(&h, 1, (const char *const[]){"0"}, (const int32_t[]){2}, got), 1);
    assert_string_equal(got[0], "0-1");
    // Its first thread stays on the launcher's CPU.
    uint8_t allowed[2] = {0, 1};
    int32_t pick[2];
    assert_int_equal(threads_assign(h.n, h.cpus, 1, allowed, (const int32_t[]){2}, pick), 1);
    assert_int_equal(h.cpus[pick[0]].id, 1);
}

static void ranks_bound_to_one_core_each_keep_their_core(void **state) {
    (void)state;
    host h = make_host(1, 2, 1);
    char got[2][128];
    assert_int_equal(assign(&h, 2, (const char *const[]){"0", "1"}, (const int32_t[]){1, 1}, got), 1);
    assert_string_equal(got[0], "0");
    assert_string_equal(got[1], "1");
}

static void more_threads_than_cpus_share_and_say_so(void **state) {
    (void)state;
    host h = make_host(1, 2, 1);
    char got[3][128];
    assert_int_equal(assign(&h, 2, (const char *const[]){"0", "1"}, (const int32_t[]){2, 2}, got), 2);
    assert_string_equal(got[0], "0-1");
    assert_string_equal(got[1], "0-1");
    // One rank wanting more threads than the host has CPUs holds every CPU, some twice.
    assert_int_equal(assign(&h, 1, (const char *const[]){""}, (const int32_t[]){3}, got), 2);
    assert_int_equal(assign(&h, 3, (const char *const[]){"", "", ""}, (const int32_t[]){1, 1, 1}, got), 2);
}

static void unbound_ranks_get_contiguous_blocks(void **state) {
    (void)state;
    // mpiexec --bind-to none: every rank may run anywhere.
    host h = make_host(1, 16, 1);
    char got[4][128];
    assert_int_equal(assign(&h, 2, (const char *const[]){"", ""}, (const int32_t[]){8, 8}, got), 1);
    assert_string_equal(got[0], "0-7");
    assert_string_equal(got[1], "8-15");
    assert_int_equal(assign(&h, 4, (const char *const[]){"", "", "", ""}, (const int32_t[]){4, 4, 4, 4}, got), 1);
    assert_string_equal(got[2], "8-11");
    assert_string_equal(got[3], "12-15");
}

static void ranks_stay_on_their_socket(void **state) {
    (void)state;
    // Two sockets of 8 cores; mpiexec --map-by socket --bind-to core put the ranks on the first
    // core of each socket; --bind-to socket gave each its whole socket.
    host h = make_host(2, 8, 1);
    char got[2][128];
    assert_int_equal(assign(&h, 2, (const char *const[]){"0", "8"}, (const int32_t[]){8, 8}, got), 1);
    assert_string_equal(got[0], "0-7");
    assert_string_equal(got[1], "8-15");
    assert_int_equal(assign(&h, 2, (const char *const[]){"0-7", "8-15"}, (const int32_t[]){4, 4}, got), 1);
    assert_string_equal(got[0], "0-3");
    assert_string_equal(got[1], "8-11");
}

static void hardware_threads_come_after_cores(void **state) {
    (void)state;
    // 4 cores with 2 hardware threads each: CPUs 0-3 and their siblings 4-7.
    host h = make_host(1, 4, 2);
    char got[2][128];
    assert_int_equal(assign(&h, 1, (const char *const[]){""}, (const int32_t[]){4}, got), 1);
    assert_string_equal(got[0], "0-3");
    assert_int_equal(assign(&h, 1, (const char *const[]){""}, (const int32_t[]){6}, got), 1);
    assert_string_equal(got[0], "0-5");
    assert_int_equal(assign(&h, 2, (const char *const[]){"", ""}, (const int32_t[]){2, 2}, got), 1);
    assert_string_equal(got[0], "0-1");
    assert_string_equal(got[1], "2-3");
    // Once every core is taken, a rank doubles up on its own cores, not on another rank's.
    assert_int_equal(assign(&h, 2, (const char *const[]){"", ""}, (const int32_t[]){4, 4}, got), 1);
    assert_string_equal(got[0], "0-1,4-5");
    assert_string_equal(got[1], "2-3,6-7");
}

static void cpu_lists_parse_and_format(void **state) {
    (void)state;
    int32_t ids[16];
    char text[64];
    assert_int_equal(threads_parse_cpu_list("0-3,8,10-11\n", ids, 16), 7);
    threads_format_cpu_list(ids, 7, text, sizeof text);
    assert_string_equal(text, "0-3,8,10-11");
    assert_int_equal(threads_parse_cpu_list("5", ids, 16), 1);
    assert_int_equal(ids[0], 5);
    assert_int_equal(threads_parse_cpu_list("\n", ids, 16), 0);
    assert_int_equal(threads_parse_cpu_list("3-1", ids, 16), -1);
    assert_int_equal(threads_parse_cpu_list("0-20", ids, 16), -1);
    assert_int_equal(threads_parse_cpu_list("1,0", ids, 16), -1);
    assert_int_equal(threads_parse_cpu_list("x", ids, 16), -1);
    threads_format_cpu_list(ids, 0, text, sizeof text);
    assert_string_equal(text, "");
}

// A cgroup's CPU quota: v2's cpu.max, v1's quota and period joined.
static void cgroup_cpu_limits_parse(void **state) {
    (void)state;
    assert_int_equal(threads_parse_cpu_limit("max 100000\n"), 0);
    assert_int_equal(threads_parse_cpu_limit("200000 100000\n"), 2);
    assert_int_equal(threads_parse_cpu_limit("150000 100000"), 2); // 1.5 CPUs: rounded up
    assert_int_equal(threads_parse_cpu_limit("50000 100000"), 1);
    assert_int_equal(threads_parse_cpu_limit("-1 100000\n"), 0);   // v1: no quota
    assert_int_equal(threads_parse_cpu_limit("100000 0"), 0);
    assert_int_equal(threads_parse_cpu_limit("x 100000"), 0);
    assert_int_equal(threads_parse_cpu_limit("100000"), 0);
    assert_int_equal(threads_parse_cpu_limit(""), 0);
}

// The default thread count divides the usable CPUs among a host's ranks, at least 1 each.
static void default_threads_divide_the_usable_cpus(void **state) {
    (void)state;
    int32_t cores;
    assert_int_equal(threads_default_count(2, 0, 1, &cores), 2);
    assert_int_equal(cores, 2);
    assert_int_equal(threads_default_count(2, 0, 2, &cores), 1);
    assert_int_equal(threads_default_count(2, 0, 3, &cores), 1); // more ranks than CPUs: still 1
    assert_int_equal(threads_default_count(32, 0, 16, &cores), 2);
    // A container of 2 CPUs' time on a 32-CPU host: 16 ranks get 1 thread each, not 2 (which ran
    // 32 threads on 2 CPUs' worth of time).
    assert_int_equal(threads_default_count(32, 2, 16, &cores), 1);
    assert_int_equal(cores, 2);
    assert_int_equal(threads_default_count(8, 3, 1, &cores), 3);
    assert_int_equal(threads_default_count(8, 16, 2, &cores), 4); // a quota above the CPUs: the CPUs
    assert_int_equal(cores, 8);
}

// More threads than CPUs on a host: one line saying so and what to do; none otherwise.
static void oversubscription_is_said_once_with_a_fix(void **state) {
    (void)state;
    char text[320];
    assert_true(threads_oversubscribed(3, 3, 1, 2, text, sizeof text));
    assert_non_null(strstr(text, "3 ranks x 1 thread on this host's 2 CPUs"));
    assert_non_null(strstr(text, "start at most 2 ranks on this host (mpiexec -n 2, or more hosts)"));
    assert_true(threads_oversubscribed(2, 4, 2, 2, text, sizeof text));
    assert_non_null(strstr(text, "2 ranks x 2 threads on this host's 2 CPUs"));
    assert_non_null(strstr(text, "give each rank at most 1 thread (--threads 1)"));
    assert_true(threads_oversubscribed(2, 5, 0, 4, text, sizeof text));
    assert_non_null(strstr(text, "2 ranks with 5 threads in all on this host's 4 CPUs"));
    assert_non_null(strstr(text, "at most 2 threads (--threads 2)"));
    assert_false(threads_oversubscribed(2, 2, 1, 2, text, sizeof text));
    assert_string_equal(text, "");
    assert_false(threads_oversubscribed(1, 1, 1, 1, text, sizeof text));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_rank_bound_to_one_core_grows_to_the_host),
        cmocka_unit_test(ranks_bound_to_one_core_each_keep_their_core),
        cmocka_unit_test(more_threads_than_cpus_share_and_say_so),
        cmocka_unit_test(unbound_ranks_get_contiguous_blocks),
        cmocka_unit_test(ranks_stay_on_their_socket),
        cmocka_unit_test(hardware_threads_come_after_cores),
        cmocka_unit_test(cpu_lists_parse_and_format),
        cmocka_unit_test(cgroup_cpu_limits_parse),
        cmocka_unit_test(default_threads_divide_the_usable_cpus),
        cmocka_unit_test(oversubscription_is_said_once_with_a_fix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
