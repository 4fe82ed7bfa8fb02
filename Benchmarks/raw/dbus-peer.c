// The D-Bus peer a user would pick instead of RemoteView, with sd-bus (libsystemd) through a
// private dbus-daemon the runner starts:
//   dbus-peer server [--exit-after-one]   own com.example.BenchEcho, answer Echo(ay) -> ay; the
//                                         bus address comes from DBUS_STARTER_ADDRESS (activation)
//                                         or BENCH_BUS_ADDRESS
//   dbus-peer call N                      N Echo calls with 64 bytes (after 1000 warm-up calls)
//   dbus-peer activate N                  N times: call Echo on the not-running name (the daemon
//                                         activates the server, which exits after one reply),
//                                         time to the reply; then wait until the name is gone
// Prints one JSON object like baselines.c.
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <time.h>

#include "common.h"


static int replied = 0;

static int echo(sd_bus_message *call, void *userdata, sd_bus_error *error) {
    const void *data;
    size_t size;
    int r = sd_bus_message_read_array(call, 'y', &data, &size);
    if (r < 0) return r;
    sd_bus_message *reply = NULL;
    r = sd_bus_message_new_method_return(call, &reply);
    if (r >= 0) r = sd_bus_message_append_array(reply, 'y', data, size);
    if (r >= 0) r = sd_bus_send(NULL, reply, NULL);
    sd_bus_message_unref(reply);
    replied = 1;
    return r < 0 ? r : 1;
}

static const sd_bus_vtable vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD("Echo", "ay", "ay", echo, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_VTABLE_END};

static sd_bus *connect_bus(void) {
    const char *address = getenv("DBUS_STARTER_ADDRESS");
    if (!address) address = getenv("BENCH_BUS_ADDRESS");
    if (!address) { fprintf(stderr, "dbus-peer: no bus address\n"); exit(2); }
    sd_bus *bus = NULL;
    int r = sd_bus_new(&bus);
    if (r >= 0) r = sd_bus_set_address(bus, address);
    if (r >= 0) r = sd_bus_set_bus_client(bus, 1);
    if (r >= 0) r = sd_bus_start(bus);
    if (r < 0) { fprintf(stderr, "dbus-peer: cannot connect to %s: %s\n", address, strerror(-r)); exit(1); }
    return bus;
}

static int call(sd_bus *bus, const uint8_t *payload) {
    sd_bus_message *message = NULL, *reply = NULL;
    sd_bus_error error = SD_BUS_ERROR_NULL;
    int r = sd_bus_message_new_method_call(bus, &message, "com.example.BenchEcho", "/com/example/Echo", "com.example.Echo", "Echo");
    if (r >= 0) r = sd_bus_message_append_array(message, 'y', payload, 64);
    if (r >= 0) r = sd_bus_call(bus, message, 0, &error, &reply);
    if (r < 0) fprintf(stderr, "dbus-peer: Echo failed: %s\n", error.message ? error.message : strerror(-r));
    sd_bus_error_free(&error);
    sd_bus_message_unref(message);
    sd_bus_message_unref(reply);
    return r;
}


int main(int argc, char **argv) {
    take_samples_flag(&argc, argv);
    if (argc < 2) { fprintf(stderr, "usage: dbus-peer server [--exit-after-one] | call N | activate N\n"); return 64; }
    // A parent's worker thread may have blocked signals (Foundation's Process keeps its mask).
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    sd_bus *bus = connect_bus();
    if (strcmp(argv[1], "server") == 0) {
        int exit_after_one = argc > 2 && strcmp(argv[2], "--exit-after-one") == 0;
        if (sd_bus_add_object_vtable(bus, NULL, "/com/example/Echo", "com.example.Echo", vtable, NULL) < 0) return 1;
        if (sd_bus_request_name(bus, "com.example.BenchEcho", 0) < 0) return 1;
        for (;;) {
            int r = sd_bus_process(bus, NULL);
            if (r < 0) return 1;
            if (exit_after_one && replied) { sd_bus_flush(bus); break; }
            if (r > 0) continue;
            if (sd_bus_wait(bus, UINT64_MAX) < 0) return 1;
        }
        sd_bus_flush_close_unref(bus);
        return 0;
    }
    int count = argc > 2 ? atoi(argv[2]) : 1000;
    uint8_t payload[64];
    memset(payload, 0x2A, sizeof payload);
    double *samples = calloc((size_t)count, sizeof *samples), total = 0;
    if (strcmp(argv[1], "call") == 0) {
        for (int i = 0; i < 1000; i++) if (call(bus, payload) < 0) return 1;
        for (int i = 0; i < count; i++) {
            double start = now_us();
            if (call(bus, payload) < 0) return 1;
            samples[i] = now_us() - start;
            total += samples[i];
        }
    } else if (strcmp(argv[1], "activate") == 0) {
        for (int i = -2; i < count; i++) {
            double start = now_us();
            if (call(bus, payload) < 0) return 1;
            double elapsed = now_us() - start;
            if (i >= 0) { samples[i] = elapsed; total += elapsed; }
            // Until the server that answered has exited, so the next call activates a new one.
            for (;;) {
                sd_bus_error error = SD_BUS_ERROR_NULL;
                sd_bus_message *reply = NULL;
                int has = 0;
                if (sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
                                       &error, &reply, "s", "com.example.BenchEcho") < 0) return 1;
                sd_bus_message_read(reply, "b", &has);
                sd_bus_message_unref(reply);
                if (!has) break;
                struct timespec pause = {0, 200000};
                nanosleep(&pause, NULL);
            }
        }
    } else {
        return 64;
    }
    report(samples, count, count / (total / 1e6));
    sd_bus_flush_close_unref(bus);
    return 0;
}
