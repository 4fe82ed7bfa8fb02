// The cold-start floor's service: a trivial static binary that sends one 64-byte message over
// fd 3 (as a launched service would) and exits. Built with -static by the benchmark runner.
#include <sys/socket.h>
#include <unistd.h>

int main(void) {
    char message[64] = "hello from a trivial service";
    return send(3, message, sizeof message, 0) == sizeof message ? 0 : 1;
}
