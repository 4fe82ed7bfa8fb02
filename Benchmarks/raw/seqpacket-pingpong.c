// The physical limit for a small round trip: a 64-byte SOCK_SEQPACKET ping-pong between two
// processes over a socketpair, blocking I/O, no encoding. Prints median and p99 in µs.
//   cc -O2 -o /tmp/pingpong Benchmarks/raw/seqpacket-pingpong.c && /tmp/pingpong 20000
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 20000;
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) { perror("socketpair"); return 1; }
    char buffer[64] = {0};
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        ssize_t n;
        while ((n = recv(fds[1], buffer, sizeof buffer, 0)) > 0) send(fds[1], buffer, (size_t)n, 0);
        _exit(0);
    }
    close(fds[1]);
    double *samples = calloc((size_t)count, sizeof *samples);
    for (int warm = 0; warm < 1000; warm++) { send(fds[0], buffer, 64, 0); recv(fds[0], buffer, 64, 0); }
    for (int i = 0; i < count; i++) {
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        send(fds[0], buffer, 64, 0);
        recv(fds[0], buffer, 64, 0);
        clock_gettime(CLOCK_MONOTONIC, &end);
        samples[i] = (double)(end.tv_sec - start.tv_sec) * 1e6 + (double)(end.tv_nsec - start.tv_nsec) / 1e3;
    }
    close(fds[0]);
    waitpid(child, NULL, 0);
    qsort(samples, (size_t)count, sizeof *samples, compare);
    printf("raw seqpacket ping-pong (64 B) x%d: median %.1f µs, p99 %.1f µs\n", count, samples[count / 2], samples[count * 99 / 100]);
    free(samples);
    return 0;
}
