// The physical limits the benchmarks compare RemoteView with, in plain C between two processes:
//   pingpong N      64-byte SOCK_SEQPACKET request/reply over a socketpair (blocking), with the
//                   CPU time and context switches per round trip of both processes
//   oneway N        N 64-byte packets one way, pipelined, then one reply: messages per second
//   fdpingpong N    the ping-pong with one memfd passed each way as SCM_RIGHTS
//   frame W H N     a producer fills a W×H×4 memfd frame, says "commit" over a socketpair; the
//                   consumer copies it (one memcpy) and says "done"; latency commit → copied, fps
// Each prints one JSON object: {"median_us":…,"p99_us":…,"min_us":…,"max_us":…,"count":…,"per_second":…}.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"



static void send_fd(int socket, int fd, char *bytes, size_t length) {
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec io = {bytes, length};
    struct msghdr message = {0};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    if (fd >= 0) {
        message.msg_control = control;
        message.msg_controllen = sizeof control;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &fd, sizeof(int));
    }
    sendmsg(socket, &message, 0);
}

static ssize_t receive_fd(int socket, int *fd, char *bytes, size_t length) {
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec io = {bytes, length};
    struct msghdr message = {0};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    ssize_t n = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    *fd = -1;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (n > 0 && header && header->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(header), sizeof(int));
    return n;
}

int main(int argc, char **argv) {
    take_samples_flag(&argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: baselines pingpong|oneway|fdpingpong N | frame W H N\n");
        return 64;
    }
    const char *mode = argv[1];
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) { perror("socketpair"); return 1; }
    char buffer[64] = {0};

    if (strcmp(mode, "frame") == 0) {
        if (argc < 5) return 64;
        size_t width = (size_t)atoi(argv[2]), height = (size_t)atoi(argv[3]);
        int count = atoi(argv[4]);
        size_t bytes = width * height * 4;
        int memory = memfd_create("frame", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (memory < 0 || ftruncate(memory, (off_t)bytes) != 0) { perror("memfd"); return 1; }
        pid_t child = fork();
        if (child == 0) {
            // The consumer: maps the frame read-only, copies it into its own image per commit.
            close(fds[0]);
            uint8_t *frame = mmap(NULL, bytes, PROT_READ, MAP_SHARED, memory, 0);
            uint8_t *image = malloc(bytes);
            memset(image, 0, bytes);
            double stamp;
            while (recv(fds[1], &stamp, sizeof stamp, 0) == sizeof stamp) {
                memcpy(image, frame, bytes);
                double latency = now_us() - stamp;
                send(fds[1], &latency, sizeof latency, 0);
            }
            _exit(0);
        }
        close(fds[1]);
        uint8_t *frame = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memory, 0);
        double *samples = calloc((size_t)count, sizeof *samples);
        int warm = 30;
        double started = 0;
        for (int i = -warm; i < count; i++) {
            if (i == 0) started = now_us();
            memset(frame, (i & 0x7F) + 1, bytes);  // the producer draws (outside the latency)
            double stamp = now_us(), latency;
            send(fds[0], &stamp, sizeof stamp, 0);
            recv(fds[0], &latency, sizeof latency, 0);
            if (i >= 0) samples[i] = latency;
        }
        double elapsed = now_us() - started;
        close(fds[0]);
        waitpid(child, NULL, 0);
        report(samples, count, count / (elapsed / 1e6));
        return 0;
    }

    int count = atoi(argv[2]);
    int with_fd = strcmp(mode, "fdpingpong") == 0;
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        ssize_t n;
        if (strcmp(mode, "oneway") == 0) {
            long received = 0;
            while ((n = recv(fds[1], buffer, sizeof buffer, 0)) > 0) {
                if (buffer[0] == 'E') {
                    // The round's count, and what this process has cost so far.
                    struct { long received; struct cost cost; } answer = {received, own_cost()};
                    send(fds[1], &answer, sizeof answer, 0);
                    received = 0;
                    continue;
                }
                received++;
            }
        } else {
            int fd;
            while ((n = receive_fd(fds[1], &fd, buffer, sizeof buffer)) > 0) {
                if (n == 1 && buffer[0] == 'U') {
                    // The parent asks what this process has cost so far.
                    struct cost cost = own_cost();
                    send(fds[1], &cost, sizeof cost, 0);
                    continue;
                }
                send_fd(fds[1], fd, buffer, (size_t)n);
                if (fd >= 0) close(fd);
            }
        }
        _exit(0);
    }
    close(fds[1]);
    double *samples = calloc((size_t)count, sizeof *samples);
    if (strcmp(mode, "oneway") == 0) {
        // Rounds of 1000 pipelined packets and an end marker; each round's time per message.
        // Both processes' cost over the measured rounds (the receiver's comes with each count).
        int rounds = count / 1000 > 0 ? count / 1000 : 1;
        struct { long received; struct cost cost; } answer;
        struct cost own_before = {0, 0}, child_before = {0, 0};
        double total = 0;
        for (int round = -2; round < rounds; round++) {
            if (round == 0) own_before = own_cost();
            double start = now_us();
            for (int i = 0; i < 1000; i++) { buffer[0] = 'M'; send(fds[0], buffer, 64, 0); }
            buffer[0] = 'E';
            send(fds[0], buffer, 64, 0);
            recv(fds[0], &answer, sizeof answer, 0);
            double elapsed = now_us() - start;
            if (round == -1) child_before = answer.cost;
            if (round >= 0) { samples[round] = elapsed / 1000; total += elapsed; }
        }
        set_cost_per_op(own_before, own_cost(), child_before, answer.cost, (double)rounds * 1000);
        close(fds[0]);
        waitpid(child, NULL, 0);
        report(samples, rounds, rounds * 1000 / (total / 1e6));
        return 0;
    }
    int memory = -1;
    if (with_fd) {
        memory = memfd_create("item", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ftruncate(memory, 64);
    }
    struct cost before = {0, 0}, child_before = {0, 0};
    for (int i = -1000; i < count; i++) {
        if (i == 0) {
            buffer[0] = 'U';
            send(fds[0], buffer, 1, 0);
            recv(fds[0], &child_before, sizeof child_before, 0);
            before = own_cost();
        }
        double start = now_us();
        int fd;
        send_fd(fds[0], memory, buffer, 64);
        receive_fd(fds[0], &fd, buffer, sizeof buffer);
        if (fd >= 0) close(fd);
        if (i >= 0) samples[i] = now_us() - start;
    }
    struct cost after = own_cost(), child_after;
    buffer[0] = 'U';
    send(fds[0], buffer, 1, 0);
    recv(fds[0], &child_after, sizeof child_after, 0);
    set_cost_per_op(before, after, child_before, child_after, count);
    double total = 0;
    for (int i = 0; i < count; i++) total += samples[i];
    close(fds[0]);
    waitpid(child, NULL, 0);
    report(samples, count, count / (total / 1e6));
    return 0;
}
