// Shared by the C baselines: a monotonic clock in microseconds and the JSON line they print.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// CPU time (user + system, µs) and context switches (voluntary + involuntary) of this process so far.
#include <sys/resource.h>
struct cost { double cpu_us; double switches; };
static struct cost own_cost(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    struct cost cost = {
        (double)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 + (double)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec),
        (double)(usage.ru_nvcsw + usage.ru_nivcsw)};
    return cost;
}

// Per operation, both processes, over the measured operations (negative: not measured).
static double cpu_us_per_op = -1, switches_per_op = -1;

// Sets the two from what this process and its peer cost before and after `operations` operations.
static void set_cost_per_op(struct cost own_before, struct cost own_after, struct cost peer_before, struct cost peer_after,
                            double operations) {
    cpu_us_per_op = (own_after.cpu_us - own_before.cpu_us + peer_after.cpu_us - peer_before.cpu_us) / operations;
    switches_per_op = (own_after.switches - own_before.switches + peer_after.switches - peer_before.switches) / operations;
}

// Set by a trailing "samples" argument: the JSON line then carries every sample too, so that a
// runner can merge interleaved chunks.
static int print_samples = 0;

// {"median_us":…,"p99_us":…,"min_us":…,"max_us":…,"count":…,"per_second":…[,"cpu_us_per_op":…,
// "switches_per_op":…][,"samples":[…]]};
// sorts samples.
static void report(double *samples, int count, double per_second) {
    qsort(samples, (size_t)count, sizeof *samples, compare);
    printf("{\"median_us\":%.3f,\"p99_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"count\":%d,\"per_second\":%.1f",
           samples[count / 2], samples[count * 99 / 100], samples[0], samples[count - 1], count, per_second);
    if (cpu_us_per_op >= 0) printf(",\"cpu_us_per_op\":%.3f,\"switches_per_op\":%.3f", cpu_us_per_op, switches_per_op);
    if (print_samples) {
        printf(",\"samples\":[");
        for (int i = 0; i < count; i++) printf(i ? ",%.3f" : "%.3f", samples[i]);
        printf("]");
    }
    printf("}\n");
}

// Takes a trailing "samples" argument off argv.
static void take_samples_flag(int *argc, char **argv) {
    if (*argc > 1 && strcmp(argv[*argc - 1], "samples") == 0) {
        print_samples = 1;
        (*argc)--;
    }
}
