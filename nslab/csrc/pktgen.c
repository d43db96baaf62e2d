/*
 * nslab-pktgen: a paced UDP frame generator and sink for RFC 2544 trials.
 *
 *   nslab-pktgen send --dst IP --port P --size FRAME --rate PPS --duration S [--count N]
 *   nslab-pktgen recv --port P --duration S [--warmup S]
 *
 * FRAME is the Ethernet frame size including FCS (64..1518); the UDP payload
 * is FRAME - 46. Every frame carries a sequence number and its send time
 * (CLOCK_REALTIME, ns): the sink computes one-way latency exactly, since all
 * network namespaces share one clock. RATE 0 sends as fast as possible (to
 * measure the generator's own ceiling). COUNT > 0 stops after N frames (a burst,
 * for the back-to-back test). Both print one JSON object on exit.
 * Sending uses sendmmsg in batches paced against the clock (sleeping, never
 * spinning: the sink shares the generator's CPU).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXBATCH 64
#define MAXFRAME 9018

static volatile sig_atomic_t stop_flag = 0;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t now_real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void usage(void) {
    fprintf(stderr, "usage: nslab-pktgen send --dst IP --port P --size FRAME --rate PPS --duration S [--count N]\n"
                    "       nslab-pktgen recv --port P --duration S [--warmup S]\n");
    exit(2);
}

/* Point n message headers at n buffers of len bytes each, one iovec per message. */
static void init_msgs(struct mmsghdr *msgs, struct iovec *iov, char (*bufs)[MAXFRAME], int n,
                      size_t len) {
    memset(msgs, 0, n * sizeof *msgs);
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
}

static int do_send(const char *dst, int port, int frame, double rate, double duration,
                   uint64_t count) {
    int payload = frame - 46;
    if (payload < 16 || frame > MAXFRAME) { fprintf(stderr, "bad frame size %d\n", frame); return 2; }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, dst, &sa.sin_addr) != 1) { fprintf(stderr, "bad address %s\n", dst); return 2; }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { perror("connect"); return 1; }

    int batch = 1;
    if (rate <= 0) batch = MAXBATCH;
    else if (rate > 2000) batch = (int)fmin(MAXBATCH, fmax(1, rate / 20000.0));
    static char bufs[MAXBATCH][MAXFRAME];
    struct mmsghdr msgs[MAXBATCH];
    struct iovec iov[MAXBATCH];
    init_msgs(msgs, iov, bufs, batch, payload);
    uint64_t seq = 0, sent = 0, errors = 0;
    double start = now_mono(), next = start, end = start + duration;
    double interval = rate > 0 ? batch / rate : 0;
    while (!stop_flag) {
        double t = now_mono();
        if (t >= end || (count && seq >= count)) break;
        if (rate > 0 && t < next) {
            /* Sleep, never spin: the sink shares this CPU and must get it. */
            double wait = next - t;
            struct timespec ts = {.tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        int nb = batch;
        if (count && count - seq < (uint64_t)nb) nb = (int)(count - seq);
        uint64_t ts = now_real_ns();
        for (int i = 0; i < nb; i++) {
            uint64_t s = seq + i;
            memcpy(bufs[i], &s, 8);
            memcpy(bufs[i] + 8, &ts, 8);
        }
        int n = sendmmsg(fd, msgs, nb, 0);
        if (n < 0) {
            errors += nb;
            /* ENOBUFS/EAGAIN: a full queue; ECONNREFUSED: an ICMP port unreachable
             * (e.g. the sink not yet or no longer listening). Counted, not fatal. */
            if (errno != ENOBUFS && errno != EAGAIN && errno != ECONNREFUSED) { perror("sendmmsg"); break; }
        }
        else { sent += n; errors += nb - n; }
        seq += nb;
        next += interval;
        if (rate > 0 && now_mono() - next > 0.1) next = now_mono();  /* fell behind: do not burst */
    }
    double elapsed = now_mono() - start;
    printf("{\"mode\": \"send\", \"frame\": %d, \"target_pps\": %.1f, \"sent\": %llu, \"errors\": %llu, "
           "\"elapsed\": %.6f, \"pps\": %.1f, \"batch\": %d, \"count\": %llu}\n", frame, rate,
           (unsigned long long)sent, (unsigned long long)errors, elapsed, sent / elapsed, batch,
           (unsigned long long)count);
    return 0;
}

static int do_recv(int port, double duration, double warmup) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    int rcvbuf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { perror("bind"); return 1; }
    static char bufs[MAXBATCH][MAXFRAME];
    struct mmsghdr msgs[MAXBATCH];
    struct iovec iov[MAXBATCH];
    init_msgs(msgs, iov, bufs, MAXBATCH, MAXFRAME);
    printf("{\"mode\": \"ready\"}\n");
    fflush(stdout);
    uint64_t received = 0, in_window = 0, max_seq = 0, reordered = 0;
    double lat_sum = 0, lat_sq = 0, lat_min = 1e18, lat_max = 0;
    double start = now_mono(), end = start + duration;
    uint64_t last_seq = 0;
    while (!stop_flag && now_mono() < end) {
        int n = recvmmsg(fd, msgs, MAXBATCH, MSG_WAITFORONE, NULL);
        if (n <= 0) continue;
        uint64_t t = now_real_ns();
        double rel = now_mono() - start;
        for (int i = 0; i < n; i++) {
            if (msgs[i].msg_len < 16) continue;
            uint64_t seq, ts;
            memcpy(&seq, bufs[i], 8);
            memcpy(&ts, bufs[i] + 8, 8);
            received++;
            if (seq < last_seq) reordered++;
            last_seq = seq;
            if (seq > max_seq) max_seq = seq;
            if (rel < warmup) continue;
            double us = ((double)t - (double)ts) / 1000.0;
            in_window++;
            lat_sum += us;
            lat_sq += us * us;
            if (us < lat_min) lat_min = us;
            if (us > lat_max) lat_max = us;
        }
    }
    double avg = in_window ? lat_sum / in_window : 0;
    double var = in_window ? lat_sq / in_window - avg * avg : 0;
    printf("{\"mode\": \"recv\", \"received\": %llu, \"in_window\": %llu, \"max_seq\": %llu, "
           "\"reordered\": %llu, \"latency_us\": {\"min\": %.3f, \"avg\": %.3f, \"max\": %.3f, "
           "\"stdev\": %.3f}}\n", (unsigned long long)received, (unsigned long long)in_window,
           (unsigned long long)max_seq, (unsigned long long)reordered,
           in_window ? lat_min : 0, avg, lat_max, var > 0 ? sqrt(var) : 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    const char *mode = argv[1], *dst = NULL;
    int port = 9, size = 64;
    uint64_t count = 0;
    double rate = 0, duration = 1, warmup = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dst")) dst = argv[i + 1];
        else if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--size")) size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate")) rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--duration")) duration = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--count")) count = strtoull(argv[i + 1], NULL, 10);
        else usage();
    }
    prctl(PR_SET_TIMERSLACK, 1UL);  /* sleep to the microsecond, not the default 50 us */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (!strcmp(mode, "send")) { if (!dst) usage(); return do_send(dst, port, size, rate, duration, count); }
    if (!strcmp(mode, "recv")) return do_recv(port, duration, warmup);
    usage();
    return 2;
}
