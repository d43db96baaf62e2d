/*
 * nslab-pktgen: a paced frame generator and sink for RFC 2544 trials.
 *
 *   nslab-pktgen send --dst IP --port P --size FRAME --rate PPS --duration S [--count N]
 *                     [--mode auto|udp|packet|xdp|live] [--iface IF --dst-mac MAC]
 *                     [--qdisc bypass|keep] [--spacing slots|frames] [--ready 1]
 *   nslab-pktgen recv --port P --duration S [--warmup S] [--mode udp|packet|xdp --iface IF]
 *                     [--latency-every N]
 *   nslab-pktgen frame --size FRAME --src IP --dst IP --port P --src-mac MAC --dst-mac MAC
 *                      [--seq N --ts NS]          (prints the frame in hex, for tests)
 *
 * FRAME is the Ethernet frame size including the 4-byte FCS (64..1518), as
 * RFC 2544 counts it: the bytes written are FRAME - 4 (the NIC or veth adds no
 * FCS; on the wire the NIC appends it). UDP payload = FRAME - 46. Every frame
 * carries a sequence number and its send time (CLOCK_REALTIME, ns), so the
 * sink measures loss, reordering and one-way latency (namespaces share one
 * clock). RATE 0 sends as fast as possible (the generator's ceiling). COUNT > 0
 * stops after exactly N frames (bursts for the back-to-back test).
 *
 * Send paths (--mode):
 *   udp     UDP socket, sendmmsg: the full socket and IP stack (the reference).
 *   packet  AF_PACKET, PACKET_TX_RING with PACKET_QDISC_BYPASS: frames built once
 *           in the ring, only sequence numbers and timestamps rewritten. The
 *           kernel hands them on as paged (not linear) buffers, which costs the
 *           next hop a pull of the headers: measured +0.5 us per frame on a
 *           veth router DUT, so RFC 2544 trials do not use it by default.
 *   xdp     AF_XDP, copy mode (generic on veth, native where the driver has it):
 *           frames built once in the UMEM, descriptors posted to the TX ring.
 *   live    XDP live frames (BPF_PROG_RUN, Linux 5.18+; xdplive.c): the kernel
 *           builds each frame from one template page, an XDP program stamps
 *           it and redirects it out of the interface, with no socket and no
 *           skb on the sender. The receiving end must run NAPI (a veth peer
 *           with GRO on or an XDP program); the first batch is checked against
 *           the interface's counters, and a path that delivers nothing fails.
 *           Its report adds "refused": frames the interface took but could
 *           not hand on (a veth whose far end's ring was full), of "sent".
 *   auto    the fastest that works here (live, xdp, packet, then udp); the
 *           raw paths need --iface and --dst-mac (the next hop's MAC).
 * --qdisc keep sends through the interface's qdisc (a shaped link stays shaped):
 * packet mode then goes through dev_queue_xmit, xdp is refused (AF_XDP always
 * bypasses the qdisc) and auto sends UDP (the reference). The default, bypass, is for
 * unshaped links.
 * Receive paths: udp (recvmmsg), packet (AF_PACKET TPACKET_V3 ring with a
 * BPF filter for the UDP port) and xdp (an XDP program on --iface counts the
 * stream's frames and drops them before any skb exists; xdplive.c). Each prints
 * one JSON object on exit; send also says which mode it used and, for auto, why.
 *
 * --cpu N pins the process to CPU N and --fifo P runs it at SCHED_FIFO priority P
 * (send and recv), set by the program itself: no taskset or chrt to start first.
 * --ready 1 (send) prints {"mode": "ready"} once the process runs, before it sets
 * up its path and sends, so a caller can start its clock then: starting the
 * program can take long (its binary read from a guest's shared root), and a
 * trial's window must not begin before the generator does.
 * Pacing sleeps, never spins (the sink may share the generator's CPU; timer
 * slack is set to 1 us); a generator that falls behind by more than 100 ms
 * does not burst to catch up. Paced frames leave in batches, one batch per
 * slot. --spacing frames (live only) spaces every frame instead: the XDP
 * program waits in the kernel until each frame is due, so the generator's
 * CPU is busy for the whole trial (not for a CPU shared with the sink), and
 * after a stall it catches up at twice the rate (a backlog over 50 ms is
 * dropped from the schedule, and shows as a rate below the target).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/if_xdp.h>
#include <linux/sockios.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "xdplive.h"

#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#ifndef AF_XDP
#define AF_XDP 44
#endif

#define MAXBATCH 64
#define MAXFRAME 1518
#define MINFRAME 64
#define HDRS 42           /* Ethernet 14 + IPv4 20 + UDP 8 */
#define FCS 4

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

static void die_usage(const char *why) {
    if (why) fprintf(stderr, "nslab-pktgen: %s\n", why);
    fprintf(stderr,
            "usage: nslab-pktgen send --dst IP --port P --size FRAME --rate PPS --duration S [--count N]\n"
            "                         [--mode auto|udp|packet|xdp|live] [--iface IF --dst-mac MAC]\n"
            "                         [--qdisc bypass|keep] [--spacing slots|frames] [--ready 1]\n"
            "                         [--cpu N] [--fifo PRIORITY]   (send and recv)\n"
            "       nslab-pktgen recv --port P --duration S [--warmup S] [--mode udp|packet|xdp --iface IF]\n"
            "                         [--latency-every N]   (xdp: the latency of every Nth frame)\n"
            "       nslab-pktgen frame --size FRAME --src IP --dst IP --port P --src-mac MAC --dst-mac MAC\n"
            "                          [--seq N --ts NS]\n");
    exit(2);
}

/* ---- arguments, checked ------------------------------------------------------ */
struct args {
    const char *dst, *src, *iface, *mode, *dst_mac, *src_mac;
    int port, size, keep_qdisc, spaced, ready, cpu, fifo;
    double rate, duration, warmup;
    uint64_t count, seq, ts, lat_every;
};

/* A bad value: one line naming the option, the value and what it takes; exit 2. */
static void die_value(const char *what, const char *s, const char *takes) {
    fprintf(stderr, "nslab-pktgen: bad --%s '%.40s'%s: %s\n", what, s, strlen(s) > 40 ? "..." : "",
            takes);
    exit(2);
}

/* A finite number in lo..hi (whole with `whole`); anything else: die_value. */
static double num_in(const char *s, const char *what, double lo, double hi, int whole) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi) || (whole && v != floor(v))) {
        char takes[120];
        snprintf(takes, sizeof takes, "%s from %g to %g", whole ? "a whole number" : "a number",
                 lo, hi);
        die_value(what, s, takes);
    }
    return v;
}

static double num(const char *s, const char *what, double lo, double hi) {
    return num_in(s, what, lo, hi, 0);
}

static double whole(const char *s, const char *what, double lo, double hi) {
    return num_in(s, what, lo, hi, 1);
}

/* Frames per second: 0 (as fast as it can) or MIN_RATE..MAX_RATE. Below
 * MIN_RATE the gap between two frames would outlast any trial (1e-300 made a
 * gap that no time_t holds). */
#define MIN_RATE 0.001
#define MAX_RATE 1e9

static double rate_arg(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v == 0 || (v >= MIN_RATE && v <= MAX_RATE)))
        die_value("rate", s, "0 (as fast as it can) or frames/s from 0.001 to 1e+09");
    return v;
}

static uint64_t u64(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || *s == '-' || *s == '+' || *s == ' ')
        die_value(what, s, "a whole number from 0 to 18446744073709551615");
    return (uint64_t)v;
}

static void parse(int argc, char **argv, struct args *a) {
    memset(a, 0, sizeof *a);
    a->port = 9; a->size = 64; a->duration = 1; a->mode = "udp"; a->cpu = -1;
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) die_usage("an option lacks its value");
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--dst")) a->dst = v;
        else if (!strcmp(k, "--src")) a->src = v;
        else if (!strcmp(k, "--iface")) a->iface = v;
        else if (!strcmp(k, "--mode")) a->mode = v;
        else if (!strcmp(k, "--dst-mac")) a->dst_mac = v;
        else if (!strcmp(k, "--src-mac")) a->src_mac = v;
        else if (!strcmp(k, "--qdisc")) {
            if (!strcmp(v, "keep")) a->keep_qdisc = 1;
            else if (strcmp(v, "bypass")) die_usage("bad --qdisc (bypass, keep)");
        }
        else if (!strcmp(k, "--spacing")) {
            if (!strcmp(v, "frames")) a->spaced = 1;
            else if (strcmp(v, "slots")) die_usage("bad --spacing (slots, frames)");
        }
        else if (!strcmp(k, "--port")) a->port = (int)whole(v, "port", 1, 65535);
        else if (!strcmp(k, "--size")) a->size = (int)whole(v, "size", MINFRAME, MAXFRAME);
        else if (!strcmp(k, "--rate")) a->rate = rate_arg(v);
        else if (!strcmp(k, "--duration")) a->duration = num(v, "duration", 0.001, 86400);
        else if (!strcmp(k, "--warmup")) a->warmup = num(v, "warmup", 0, 86400);
        else if (!strcmp(k, "--count")) a->count = (uint64_t)whole(v, "count", 0, 1e12);
        else if (!strcmp(k, "--ready")) a->ready = (int)whole(v, "ready", 0, 1);
        else if (!strcmp(k, "--cpu")) a->cpu = (int)whole(v, "cpu", 0, CPU_SETSIZE - 1);
        else if (!strcmp(k, "--fifo")) a->fifo = (int)whole(v, "fifo", 1, 99);
        else if (!strcmp(k, "--latency-every")) {
            a->lat_every = (uint64_t)whole(v, "latency-every", 1, 65536);
            if (a->lat_every & (a->lat_every - 1)) die_usage("bad --latency-every (a power of two, 1..65536)");
        }
        else if (!strcmp(k, "--seq")) a->seq = u64(v, "seq");
        else if (!strcmp(k, "--ts")) a->ts = u64(v, "ts");
        else die_usage("unknown option");
    }
    if (a->iface && (strlen(a->iface) == 0 || strlen(a->iface) >= IFNAMSIZ)) die_usage("bad --iface");
}

static int parse_mac(const char *s, uint8_t mac[6]) {
    unsigned v[6];
    char tail;
    if (!s || sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
        return -1;
    for (int i = 0; i < 6; i++) mac[i] = (uint8_t)v[i];
    return 0;
}

/* ---- frames -------------------------------------------------------------------- */
static uint16_t csum16(const void *data, size_t len) {
    const uint8_t *p = data;
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (len & 1) sum += (uint32_t)(p[len - 1] << 8);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/* Build FRAME - 4 bytes: Ethernet, IPv4 (DF, TTL 64, checksum), UDP (checksum 0,
 * allowed for IPv4), payload = seq (8, host order) + send time (8, ns) + zeros. */
static size_t build_frame(uint8_t *f, int frame, const uint8_t smac[6], const uint8_t dmac[6],
                          struct in_addr src, struct in_addr dst, int port) {
    size_t len = (size_t)frame - FCS;
    memset(f, 0, len);
    memcpy(f, dmac, 6);
    memcpy(f + 6, smac, 6);
    f[12] = 0x08; f[13] = 0x00;
    uint8_t *ip = f + 14;
    uint16_t iplen = (uint16_t)(len - 14);
    ip[0] = 0x45; ip[1] = 0;
    ip[2] = iplen >> 8; ip[3] = iplen & 0xff;
    ip[6] = 0x40;                /* DF */
    ip[8] = 64; ip[9] = 17;      /* TTL, UDP */
    memcpy(ip + 12, &src, 4);
    memcpy(ip + 16, &dst, 4);
    uint16_t c = csum16(ip, 20);
    ip[10] = c >> 8; ip[11] = c & 0xff;
    uint8_t *udp = ip + 20;
    uint16_t sport = 49152, ulen = (uint16_t)(iplen - 20);
    udp[0] = sport >> 8; udp[1] = sport & 0xff;
    udp[2] = (uint16_t)port >> 8; udp[3] = port & 0xff;
    udp[4] = ulen >> 8; udp[5] = ulen & 0xff;
    return len;
}

static inline void stamp(uint8_t *payload, uint64_t seq, uint64_t ts) {
    memcpy(payload, &seq, 8);
    memcpy(payload + 8, &ts, 8);
}

static int iface_info(const char *ifname, int *ifindex, uint8_t mac[6], struct in_addr *ip) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    int rc = -1;
    if (fd >= 0 && ioctl(fd, SIOCGIFINDEX, &ifr) == 0) {
        *ifindex = ifr.ifr_ifindex;
        if (ioctl(fd, SIOCGIFHWADDR, &ifr) == 0) {
            memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
            ifr.ifr_addr.sa_family = AF_INET;
            if (ioctl(fd, SIOCGIFADDR, &ifr) == 0) {
                *ip = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
                rc = 0;
            }
        }
    }
    if (fd >= 0) close(fd);
    return rc;
}

/* ---- pacing -------------------------------------------------------------------- */
struct pacer {
    double rate, interval, next, start, end;
    int batch, maxbatch;
    int now;          /* frames to send at this wake-up (pacer_wait) */
    uint64_t done;    /* frames the schedule has handed out */
};

/* Batches of frames at slot_hz slots per second (at most maxbatch frames a slot). */
static void pacer_init_slots(struct pacer *p, double rate, double duration, int maxbatch, double slot_hz) {
    p->rate = rate;
    p->batch = 1;
    p->maxbatch = maxbatch;
    if (rate <= 0) p->batch = maxbatch;
    else if (rate > 0.1 * slot_hz) p->batch = (int)fmin(maxbatch, fmax(1, rate / slot_hz));
    p->interval = rate > 0 ? p->batch / rate : 0;
    p->start = now_mono();
    p->next = p->start;
    p->end = p->start + duration;
    p->now = p->batch;
    p->done = 0;
}

static void pacer_init(struct pacer *p, double rate, double duration, int maxbatch) {
    pacer_init_slots(p, rate, duration, maxbatch, 20000.0);
}

/* Wait for the next batch's slot; 0 when the trial is over. p->now is then the
 * frames owed by this time, at most 2 x batch - 1: one batch on schedule,
 * more when a late wake-up or a slow send put the sender behind, so the mean
 * rate holds where a batch costs more than its slot (AF_PACKET at 100 kfps
 * was 11 % short). A sender with batches of one still catches up one frame a
 * call, as before: sending all it owed at once lost more frames on the
 * emulated wire between two TCG guests (1.25 % instead of at most 0.56 %). */
static int pacer_wait(struct pacer *p) {
    for (;;) {
        if (stop_flag) return 0;
        double t = now_mono();
        if (t >= p->end) return 0;
        if (p->rate <= 0) { p->now = p->batch; return 1; }
        if (t >= p->next) {
            uint64_t due = ((uint64_t)((t - p->start) / p->interval) + 1) * (uint64_t)p->batch;
            uint64_t owed = due > p->done ? due - p->done : (uint64_t)p->batch;
            uint64_t cap = (uint64_t)(2 * p->batch - 1);
            if (cap > (uint64_t)p->maxbatch) cap = (uint64_t)p->maxbatch;
            p->now = (int)(owed < cap ? owed : cap);
            if (p->now < 1) p->now = 1;
            return 1;
        }
        /* Sleep, never spin: the sink shares this CPU and must get it (and a
         * spinning generator would read as a saturated one to the guard).
         * Never past the end of the trial, and at most a second at a time (a
         * stop is seen on time); 0 < wait <= 1 here, so time_t holds it. */
        double wait = fmin(fmin(p->next, p->end) - t, 1.0);
        struct timespec ts = {.tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void pacer_done(struct pacer *p) {
    p->done += (uint64_t)p->now;
    if (p->rate <= 0) return;
    p->next = p->start + (double)(p->done / (uint64_t)p->batch) * p->interval;
    double t = now_mono();
    if (t - p->next > 0.1) {  /* fell behind by over 100 ms: do not burst, start again from now */
        p->done = ((uint64_t)((t - p->start) / p->interval)) * (uint64_t)p->batch;
        p->next = t;
    }
}

/* refused: the live paths' frames the interface refused (counted in sent),
 * -1 where the driver does not count them (printed as null), REFUSED_NA on
 * the other paths (not printed: their refusals are errors). */
#define REFUSED_NA (-2LL)
static void report_send_refused(const char *mode, const char *why, int frame, double rate,
                                uint64_t sent, uint64_t errors, double elapsed, int batch,
                                uint64_t count, long long refused) {
    char extra[48] = "";
    if (refused >= 0) snprintf(extra, sizeof extra, ", \"refused\": %lld", refused);
    else if (refused == -1) snprintf(extra, sizeof extra, ", \"refused\": null");
    printf("{\"mode\": \"send\", \"path\": \"%s\", \"why\": \"%s\", \"frame\": %d, \"target_pps\": %.1f, "
           "\"sent\": %llu, \"errors\": %llu, \"elapsed\": %.6f, \"pps\": %.1f, \"batch\": %d, "
           "\"count\": %llu%s}\n", mode, why, frame, rate, (unsigned long long)sent,
           (unsigned long long)errors, elapsed, elapsed > 0 ? sent / elapsed : 0.0, batch,
           (unsigned long long)count, extra);
}

static void report_send(const char *mode, const char *why, int frame, double rate, uint64_t sent,
                        uint64_t errors, double elapsed, int batch, uint64_t count) {
    report_send_refused(mode, why, frame, rate, sent, errors, elapsed, batch, count, REFUSED_NA);
}

/* ---- send: UDP sockets (the reference) ------------------------------------------- */
static int send_udp(const struct args *a, const char *why) {
    int payload = a->size - 46;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->port)};
    if (!a->dst || inet_pton(AF_INET, a->dst, &sa.sin_addr) != 1) die_usage("bad --dst");
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { perror("connect"); return 1; }
    static uint8_t bufs[MAXBATCH][MAXFRAME];
    struct mmsghdr msgs[MAXBATCH];
    struct iovec iov[MAXBATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < MAXBATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = (size_t)payload;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    struct pacer p;
    pacer_init(&p, a->rate, a->duration, MAXBATCH);
    uint64_t seq = 0, sent = 0, errors = 0;
    while (pacer_wait(&p)) {
        if (a->count && seq >= a->count) break;
        int nb = p.now;
        if (a->count && a->count - seq < (uint64_t)nb) nb = (int)(a->count - seq);
        uint64_t ts = now_real_ns();
        for (int i = 0; i < nb; i++) stamp(bufs[i], seq + i, ts);
        int n = sendmmsg(fd, msgs, (unsigned)nb, 0);
        if (n < 0) {
            errors += (uint64_t)nb;
            /* ENOBUFS/EAGAIN: a full queue; ECONNREFUSED: an ICMP port unreachable. */
            if (errno != ENOBUFS && errno != EAGAIN && errno != ECONNREFUSED) { perror("sendmmsg"); break; }
        } else { sent += (uint64_t)n; errors += (uint64_t)(nb - n); }
        seq += (uint64_t)nb;
        pacer_done(&p);
    }
    report_send("udp", why, a->size, a->rate, sent, errors, now_mono() - p.start, p.batch, a->count);
    close(fd);
    return 0;
}

/* Common setup for the raw paths: interface, addresses, the frame template. */
struct raw { int ifindex; uint8_t smac[6], dmac[6]; struct in_addr src, dst; uint8_t tmpl[MAXFRAME]; size_t len; };

static int raw_setup(const struct args *a, struct raw *r, char *why, size_t whylen) {
    if (!a->iface) { snprintf(why, whylen, "no --iface"); return -1; }
    if (parse_mac(a->dst_mac, r->dmac) < 0) { snprintf(why, whylen, "no valid --dst-mac"); return -1; }
    if (iface_info(a->iface, &r->ifindex, r->smac, &r->src) < 0) {
        snprintf(why, whylen, "%s has no IPv4 address or does not exist", a->iface);
        return -1;
    }
    if (a->src && inet_pton(AF_INET, a->src, &r->src) != 1) die_usage("bad --src");
    if (!a->dst || inet_pton(AF_INET, a->dst, &r->dst) != 1) die_usage("bad --dst");
    r->len = build_frame(r->tmpl, a->size, r->smac, r->dmac, r->src, r->dst, a->port);
    return 0;
}

/* ---- send: AF_PACKET TX ring with qdisc bypass ----------------------------------- */
#define RING_FRAMES 4096
#define RING_FRAME_SZ 2048

static int send_packet(const struct args *a, const struct raw *r, const char *why) {
    int fd = socket(AF_PACKET, SOCK_RAW, 0);
    if (fd < 0) return -1;
    int v = TPACKET_V2, one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0 ||
        (!a->keep_qdisc &&
         setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) < 0)) { close(fd); return -1; }
    struct tpacket_req req = {.tp_block_size = RING_FRAME_SZ * 32, .tp_frame_size = RING_FRAME_SZ,
                              .tp_block_nr = RING_FRAMES / 32, .tp_frame_nr = RING_FRAMES};
    if (setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof req) < 0) { close(fd); return -1; }
    size_t ringsz = (size_t)req.tp_block_size * req.tp_block_nr;
    uint8_t *ring = mmap(NULL, ringsz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED) { close(fd); return -1; }
    struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
                             .sll_ifindex = r->ifindex, .sll_halen = 6};
    memcpy(ll.sll_addr, r->dmac, 6);
    if (bind(fd, (struct sockaddr *)&ll, sizeof ll) < 0) { munmap(ring, ringsz); close(fd); return -1; }
    size_t off = TPACKET2_HDRLEN - sizeof(struct sockaddr_ll);
    for (int i = 0; i < RING_FRAMES; i++) memcpy(ring + (size_t)i * RING_FRAME_SZ + off, r->tmpl, r->len);

    struct pacer p;
    pacer_init(&p, a->rate, a->duration, MAXBATCH);
    uint64_t seq = 0, sent = 0, errors = 0;
    unsigned slot = 0;
    while (pacer_wait(&p)) {
        if (a->count && seq >= a->count) break;
        int nb = p.now;
        if (a->count && a->count - seq < (uint64_t)nb) nb = (int)(a->count - seq);
        uint64_t ts = now_real_ns();
        int queued = 0;
        for (int i = 0; i < nb; i++) {
            struct tpacket2_hdr *h = (struct tpacket2_hdr *)(ring + (size_t)slot * RING_FRAME_SZ);
            if (h->tp_status & TP_STATUS_WRONG_FORMAT) { errors++; h->tp_status = TP_STATUS_AVAILABLE; }
            while (h->tp_status != TP_STATUS_AVAILABLE) {   /* the kernel still owns it */
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                poll(&pfd, 1, 1);
                if (stop_flag) break;
            }
            stamp(ring + (size_t)slot * RING_FRAME_SZ + off + HDRS, seq + (uint64_t)i, ts);
            h->tp_len = (uint32_t)r->len;
            __sync_synchronize();
            h->tp_status = TP_STATUS_SEND_REQUEST;
            slot = (slot + 1) % RING_FRAMES;
            queued++;
        }
        ssize_t n = sendto(fd, NULL, 0, 0, NULL, 0);
        if (n < 0) {
            if (errno != ENOBUFS && errno != EAGAIN) { perror("sendto"); break; }
            errors += (uint64_t)queued;
        } else {
            sent += (uint64_t)n / r->len;
            if ((uint64_t)n / r->len < (uint64_t)queued) errors += (uint64_t)queued - (uint64_t)n / r->len;
        }
        seq += (uint64_t)nb;
        pacer_done(&p);
    }
    report_send("packet", why, a->size, a->rate, sent, errors, now_mono() - p.start, p.batch, a->count);
    munmap(ring, ringsz);
    close(fd);
    return 0;
}

/* ---- send: AF_XDP (copy mode) ------------------------------------------------------ */
#define XSK_FRAMES 4096
#define XSK_FRAME_SZ 2048
#define XSK_RING 2048

struct xring { volatile uint32_t *prod, *cons, *flags; void *desc; uint32_t size; };

static int xmap(int fd, struct xring *x, const struct xdp_ring_offset *o, uint64_t pgoff,
                size_t desc_size, void **base, size_t *len) {
    *len = o->desc + XSK_RING * desc_size;
    *base = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)pgoff);
    if (*base == MAP_FAILED) return -1;
    x->prod = (uint32_t *)((uint8_t *)*base + o->producer);
    x->cons = (uint32_t *)((uint8_t *)*base + o->consumer);
    x->flags = (uint32_t *)((uint8_t *)*base + o->flags);
    x->desc = (uint8_t *)*base + o->desc;
    x->size = XSK_RING;
    return 0;
}

static int send_xdp(const struct args *a, const struct raw *r, const char *why) {
    int fd = socket(AF_XDP, SOCK_RAW, 0);
    if (fd < 0) return -1;
    size_t umem_len = (size_t)XSK_FRAMES * XSK_FRAME_SZ;
    uint8_t *umem = mmap(NULL, umem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (umem == MAP_FAILED) { close(fd); return -1; }
    struct xdp_umem_reg mr = {.addr = (uint64_t)(uintptr_t)umem, .len = umem_len,
                              .chunk_size = XSK_FRAME_SZ, .headroom = 0};
    int ringsz = XSK_RING;
    struct xdp_mmap_offsets off;
    socklen_t optlen = sizeof off;
    void *fb = NULL, *cb = NULL, *tb = NULL;
    size_t fl = 0, cl = 0, tl = 0;
    struct xring fill, comp, tx;
    int rc = -1;
    if (setsockopt(fd, SOL_XDP, XDP_UMEM_REG, &mr, sizeof mr) < 0 ||
        setsockopt(fd, SOL_XDP, XDP_UMEM_FILL_RING, &ringsz, sizeof ringsz) < 0 ||
        setsockopt(fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &ringsz, sizeof ringsz) < 0 ||
        setsockopt(fd, SOL_XDP, XDP_TX_RING, &ringsz, sizeof ringsz) < 0 ||
        getsockopt(fd, SOL_XDP, XDP_MMAP_OFFSETS, &off, &optlen) < 0 ||
        xmap(fd, &fill, &off.fr, XDP_UMEM_PGOFF_FILL_RING, sizeof(uint64_t), &fb, &fl) < 0 ||
        xmap(fd, &comp, &off.cr, XDP_UMEM_PGOFF_COMPLETION_RING, sizeof(uint64_t), &cb, &cl) < 0 ||
        xmap(fd, &tx, &off.tx, XDP_PGOFF_TX_RING, sizeof(struct xdp_desc), &tb, &tl) < 0)
        goto out;
    struct sockaddr_xdp sx = {.sxdp_family = AF_XDP, .sxdp_ifindex = (uint32_t)r->ifindex,
                              .sxdp_queue_id = 0, .sxdp_flags = XDP_COPY};
    /* A socket closed a moment ago (the previous trial's) holds the queue until
     * the kernel's deferred release runs: retry EBUSY for up to 2 s. */
    for (int tries = 0;; tries++) {
        if (bind(fd, (struct sockaddr *)&sx, sizeof sx) == 0) break;
        if (errno != EBUSY || tries >= 200) goto out;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < XSK_FRAMES; i++) memcpy(umem + (size_t)i * XSK_FRAME_SZ, r->tmpl, r->len);
    {
        struct pacer p;
        pacer_init(&p, a->rate, a->duration, MAXBATCH);
        uint64_t seq = 0, sent = 0, errors = 0, outstanding = 0;
        uint32_t free_frame = 0;
        struct xdp_desc *descs = tx.desc;
        uint64_t *cdesc = comp.desc;
        while (pacer_wait(&p)) {
            if (a->count && seq >= a->count) break;
            int nb = p.now;
            if (a->count && a->count - seq < (uint64_t)nb) nb = (int)(a->count - seq);
            /* reap completions */
            uint32_t cc = *comp.cons, cp = __atomic_load_n(comp.prod, __ATOMIC_ACQUIRE);
            if (cp != cc) {
                sent += cp - cc;
                outstanding -= cp - cc;
                (void)cdesc;
                __atomic_store_n(comp.cons, cp, __ATOMIC_RELEASE);
            }
            while (outstanding + (uint64_t)nb > XSK_RING - 1) {  /* ring full: kick and wait */
                sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
                cc = *comp.cons; cp = __atomic_load_n(comp.prod, __ATOMIC_ACQUIRE);
                sent += cp - cc; outstanding -= cp - cc;
                __atomic_store_n(comp.cons, cp, __ATOMIC_RELEASE);
                if (stop_flag) break;
            }
            uint64_t ts = now_real_ns();
            uint32_t prod = *tx.prod;
            for (int i = 0; i < nb; i++) {
                uint64_t addr = (uint64_t)(free_frame % XSK_FRAMES) * XSK_FRAME_SZ;
                free_frame++;
                stamp(umem + addr + HDRS, seq + (uint64_t)i, ts);
                descs[(prod + (uint32_t)i) & (XSK_RING - 1)] = (struct xdp_desc){.addr = addr,
                                                                                 .len = (uint32_t)r->len};
            }
            __atomic_store_n(tx.prod, prod + (uint32_t)nb, __ATOMIC_RELEASE);
            outstanding += (uint64_t)nb;
            if (sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0 &&
                errno != EAGAIN && errno != ENOBUFS && errno != EBUSY) { perror("sendto"); break; }
            seq += (uint64_t)nb;
            pacer_done(&p);
        }
        double t_end = now_mono() + 0.5;  /* let the last descriptors complete */
        while (outstanding && now_mono() < t_end) {
            sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
            uint32_t cc = *comp.cons, cp = __atomic_load_n(comp.prod, __ATOMIC_ACQUIRE);
            sent += cp - cc; outstanding -= cp - cc;
            __atomic_store_n(comp.cons, cp, __ATOMIC_RELEASE);
        }
        errors += outstanding;
        report_send("xdp", why, a->size, a->rate, sent, errors, now_mono() - p.start, p.batch, a->count);
        rc = 0;
    }
out:;
    int saved = errno;
    if (tb) munmap(tb, tl);
    if (cb) munmap(cb, cl);
    if (fb) munmap(fb, fl);
    munmap(umem, umem_len);
    close(fd);
    errno = saved;
    return rc;
}

/* ---- send: XDP live frames (xdplive.c) ------------------------------------------- */
#define LIVE_MAXBATCH 8192
#ifndef LIVE_SLOT_HZ
/* One BPF_PROG_RUN per 500 us. Each run creates and destroys a page pool, and
 * pools whose pages are still at the far end linger and are walked on every
 * later release (perf: rhashtable walks in page_pool_release_retry): about
 * 200 us a run here, so 20,000 runs/s (the socket paths' slots) could not
 * even reach 100 kfps. Measured at 1 GbE line rate, 64 B, one CPU, the far end's
 * CPU kept awake: 1 ms slots delivered 90 % (bursts of 1,488 overflow the veth peer's 256-frame ring), 500 us
 * slots 98.5 %, 200 us slots could only send 1.05 Mfps. */
#define LIVE_SLOT_HZ 2000.0
#endif

/* Frames the interface has handed on to its far end's XDP ring (veth: the
 * tx_queue_N_xdp_xmit and _xdp_xmit_errors counters of `ethtool -S`, which
 * count only frames sent with ndo_xdp_xmit, so a stray packet the stack sends
 * meanwhile, such as an IPv6 router solicitation, cannot pass for one; a
 * receiving end without NAPI leaves them unchanged). Drivers without such
 * counters: tx_packets + tx_dropped from sysfs. */
static uint64_t if_sysfs_handed_on(const char *ifname) {
    uint64_t total = 0;
    const char *names[] = {"tx_packets", "tx_dropped"};
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", ifname, names[i]);
        FILE *f = fopen(path, "r");
        unsigned long long v = 0;
        if (f) {
            if (fscanf(f, "%llu", &v) != 1) v = 0;
            fclose(f);
        }
        total += v;
    }
    return total;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* Sum of the driver's xdp_xmit counters (errors_only: of its _xdp_xmit_errors
 * counters alone: frames it refused, such as a veth whose far end's 256-frame
 * ring was full), or -1 when it has none. */
static int64_t if_xdp_xmit_counters(const char *ifname, int errors_only) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int64_t total = -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
    struct {
        struct ethtool_sset_info hdr;
        uint32_t len;
    } sset = {.hdr = {.cmd = ETHTOOL_GSSET_INFO, .sset_mask = 1ULL << ETH_SS_STATS}};
    ifr.ifr_data = (void *)&sset;
    struct ethtool_gstrings *names = NULL;
    struct ethtool_stats *stats = NULL;
    if (ioctl(fd, SIOCETHTOOL, &ifr) < 0 || !(sset.hdr.sset_mask & (1ULL << ETH_SS_STATS))) goto out;
    uint32_t n = sset.len;
    if (n == 0 || n > 65536) goto out;
    names = calloc(1, sizeof *names + (size_t)n * ETH_GSTRING_LEN);
    stats = calloc(1, sizeof *stats + (size_t)n * sizeof(uint64_t));
    if (!names || !stats) goto out;
    names->cmd = ETHTOOL_GSTRINGS;
    names->string_set = ETH_SS_STATS;
    names->len = n;
    ifr.ifr_data = (void *)names;
    if (ioctl(fd, SIOCETHTOOL, &ifr) < 0) goto out;
    stats->cmd = ETHTOOL_GSTATS;
    stats->n_stats = n;
    ifr.ifr_data = (void *)stats;
    if (ioctl(fd, SIOCETHTOOL, &ifr) < 0) goto out;
    for (uint32_t i = 0; i < n && i < names->len && i < stats->n_stats; i++) {
        char name[ETH_GSTRING_LEN + 1];
        memcpy(name, names->data + (size_t)i * ETH_GSTRING_LEN, ETH_GSTRING_LEN);
        name[ETH_GSTRING_LEN] = 0;
        if ((!errors_only && ends_with(name, "_xdp_xmit")) || ends_with(name, "_xdp_xmit_errors"))
            total = (total < 0 ? 0 : total) + (int64_t)stats->data[i];
    }
out:
    free(names);
    free(stats);
    close(fd);
    return total;
}

static int64_t if_xdp_xmit(const char *ifname) { return if_xdp_xmit_counters(ifname, 0); }

static uint64_t if_handed_on(const char *ifname) {
    int64_t x = if_xdp_xmit(ifname);
    return x >= 0 ? (uint64_t)x : if_sysfs_handed_on(ifname);
}

static char live_why[300];

/* The kernel drops live frames silently where the receiving end runs no NAPI:
 * the first run must show up in the interface's counters. */
static int live_first_check(const struct args *a, uint64_t before, uint64_t nb) {
    double until = now_mono() + 0.05;
    while (if_handed_on(a->iface) == before && now_mono() < until) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000};
        nanosleep(&ts, NULL);
    }
    if (if_handed_on(a->iface) != before) return 0;
    snprintf(live_why, sizeof live_why, "%s handed on none of the first %llu frames "
             "(the receiving end runs no NAPI: GRO off and no XDP program)", a->iface,
             (unsigned long long)nb);
    errno = ENXIO;
    return -1;
}

/* Frame spacing in the kernel: gaps up to this are waited out by the XDP
 * program (XL_SPIN_READS clock reads cover them with room to spare); wider
 * ones are paced from user space, one frame a slot. */
#define LIVE_SPACED_MAX_GAP_NS 20000.0
/* Frames a kernel batch builds before it flushes them to the interface: about
 * 2 us of frames, so frames reach the far end within 2 us of their stamps. */
#define LIVE_SPACED_FLUSH_NS 10000.0
/* Behind schedule, frames leave at twice the rate until the backlog is gone;
 * a backlog of more than 50 ms (a long stall) is dropped from the schedule. */
#define LIVE_CATCHUP_NS 50000000.0
/* Spaced runs: each BPF_PROG_RUN covers 10 ms of frames (each run sets up a
 * page pool: tens of microseconds, made up for by the catch-up). */
#define LIVE_SPACED_RUN_HZ 100.0

static int send_live(const struct args *a, const struct raw *r, const char *why) {
    struct xl_gen g;
    if (xl_gen_open(&g, r->ifindex, r->tmpl, (uint32_t)r->len, live_why, sizeof live_why) < 0) return -1;
    uint64_t before = if_handed_on(a->iface);
    int64_t refused_before = if_xdp_xmit_counters(a->iface, 1);
    struct pacer p;
    int spaced = a->spaced && a->rate > 0 && 1e9 / a->rate <= LIVE_SPACED_MAX_GAP_NS;
    uint32_t kbatch = 0;
    if (spaced) {
        /* One run per slot's worth of frames, back to back: the program waits
         * for each frame's time, so user space only keeps the kernel fed. */
        double gap = 1e9 / a->rate;
        pacer_init_slots(&p, 0, a->duration, (int)fmax(1, a->rate / LIVE_SPACED_RUN_HZ), LIVE_SLOT_HZ);
        kbatch = (uint32_t)fmin(64, fmax(1, LIVE_SPACED_FLUSH_NS / gap));
        g.state->gap_ns = (uint64_t)llround(gap);
        g.state->catchup_ns = (uint64_t)LIVE_CATCHUP_NS;
        g.state->late_gap_ns = (uint64_t)llround(gap / 2);
        g.state->next_ns = (uint64_t)(now_mono() * 1e9);
    } else {
        pacer_init_slots(&p, a->rate, a->duration, LIVE_MAXBATCH, LIVE_SLOT_HZ);
    }
    uint64_t errors = 0;
    int checked = 0;
    for (;;) {
        if (spaced ? (stop_flag || now_mono() >= p.end) : !pacer_wait(&p)) break;
        uint64_t seq = g.state->seq;
        if (a->count && seq >= a->count) break;
        uint64_t nb = (uint64_t)p.now;
        if (a->count && a->count - seq < nb) nb = a->count - seq;
        if (xl_gen_run(&g, (uint32_t)nb, kbatch) < 0 && errno != EINTR) {
            snprintf(live_why, sizeof live_why, "BPF_PROG_RUN: %s", strerror(errno));
            if (!checked) { int e = errno; xl_gen_close(&g); errno = e; return -1; }
            perror("nslab-pktgen: BPF_PROG_RUN");
            break;
        }
        if (!checked) {
            if (live_first_check(a, before, nb) < 0) { xl_gen_close(&g); errno = ENXIO; return -1; }
            checked = 1;
        }
        if (!spaced) pacer_done(&p);
    }
    /* The program's own count: every frame it stamped went to the interface
     * (offered). Of those, the interface refused what its _xdp_xmit_errors
     * counters gained: on a veth, frames that found the far end's ring full
     * because its NAPI did not run for a while (1.28 ms of frames at 200
     * kfps): the receiving end's loss, not the generator's, so they stay in
     * sent and are reported beside it (-1: the driver does not count them). */
    double elapsed = now_mono() - p.start;
    int64_t refused_after = refused_before < 0 ? -1 : if_xdp_xmit_counters(a->iface, 1);
    report_send_refused(spaced ? "live-spaced" : "live", why, a->size, a->rate, g.state->seq,
                        errors, elapsed, spaced ? 1 : p.batch, a->count,
                        refused_after < 0 ? -1 : (long long)(refused_after - refused_before));
    xl_gen_close(&g);
    return 0;
}

static int do_send(const struct args *a) {
    char why[200] = "";
    if (a->spaced && strcmp(a->mode, "live")) {
        fprintf(stderr, "nslab-pktgen: --spacing frames is for --mode live only\n");
        return 2;
    }
    if (!strcmp(a->mode, "udp")) return send_udp(a, "asked for");
    struct raw r;
    int raw_ok = raw_setup(a, &r, why, sizeof why) == 0;
    if ((!strcmp(a->mode, "xdp") || !strcmp(a->mode, "live")) && a->keep_qdisc) {
        fprintf(stderr, "nslab-pktgen: --mode %s bypasses the qdisc: not with --qdisc keep\n", a->mode);
        return 2;
    }
    if (!strcmp(a->mode, "live")) {
        if (!raw_ok) { fprintf(stderr, "nslab-pktgen: --mode live: %s\n", why); return 2; }
        if (send_live(a, &r, "asked for") < 0) { fprintf(stderr, "nslab-pktgen: --mode live: %s\n", live_why); return 1; }
        return 0;
    }
    if (!strcmp(a->mode, "packet") || !strcmp(a->mode, "xdp")) {
        if (!raw_ok) { fprintf(stderr, "nslab-pktgen: --mode %s: %s\n", a->mode, why); return 2; }
        int rc = !strcmp(a->mode, "packet") ? send_packet(a, &r, "asked for") : send_xdp(a, &r, "asked for");
        if (rc < 0) { fprintf(stderr, "nslab-pktgen: --mode %s: %s\n", a->mode, strerror(errno)); return 1; }
        return rc;
    }
    if (strcmp(a->mode, "auto")) die_usage("bad --mode (auto, udp, packet, xdp, live)");
    if (!raw_ok) {
        char w[260];
        snprintf(w, sizeof w, "auto: %s, so udp", why);
        return send_udp(a, w);
    }
    if (a->keep_qdisc)  /* AF_XDP bypasses the qdisc; AF_PACKET's ring hands paged frames on */
        return send_udp(a, "auto: the qdisc is kept, so udp");
    if (send_live(a, &r, "auto: XDP live frames work here") == 0) return 0;
    char w[520];
    snprintf(w, sizeof w, "auto: XDP live frames failed (%s), so AF_XDP", live_why);
    int rc = send_xdp(a, &r, w);
    if (rc >= 0) return rc;
    int xerr = errno;
    snprintf(w, sizeof w, "auto: live frames and AF_XDP failed (%s), so AF_PACKET", strerror(xerr));
    rc = send_packet(a, &r, w);
    if (rc >= 0) return rc;
    snprintf(w, sizeof w, "auto: live frames, AF_XDP and AF_PACKET failed (%s), so udp", strerror(errno));
    return send_udp(a, w);
}

/* ---- receive --------------------------------------------------------------------- */
struct rstats {
    uint64_t received, in_window, max_seq, reordered, last_seq;
    double sum, sq, mn, mx;
    /* the generator's pacing, seen from its timestamps: the gaps between
     * successive send times (a batch shares one), over the window, of frames
     * sent one after the other (a hole of lost frames is no send gap) */
    uint64_t last_ts, gaps, glong;   /* glong: gaps of XL_LONG_GAP_NS or more */
    double gsum, gsq, gmax;
    /* the window's first and latest send times and their frames' seq: the
     * mean gap over every frame sent in between, lost ones included (a hole
     * of frames lost while the sender caught up at twice the rate would
     * otherwise leave the successive gaps' mean above the pacing) */
    uint64_t first_ts, first_seq, last_ts_seq;
};

/* Every latency of the window in a histogram (the user-space sinks): 0.1 us
 * bins up to 2 ms, 10 us bins up to 2 s, then one overflow bin. Its median
 * and 99th percentile go out beside the moments: one wake-up of a few ms
 * moves a trial's mean by tens of us at 1,000 fps, but not its median. */
#define H_FINE 20000
#define H_COARSE 199800
static uint32_t hist[H_FINE + H_COARSE + 1];
static uint64_t hist_n;

static inline void hist_add(double us) {
    size_t i;
    if (us < 0) us = 0;
    if (us < 2000.0) i = (size_t)(us * 10.0);
    else {
        double j = (us - 2000.0) / 10.0;
        i = j >= H_COARSE ? H_FINE + H_COARSE : H_FINE + (size_t)j;
    }
    hist[i]++;
    hist_n++;
}

/* The q-quantile of the histogram: the middle of the first bin where the
 * count reaches q of all (the overflow bin gives mx, the largest seen). */
static double hist_q(double q, double mx) {
    uint64_t want = (uint64_t)ceil(q * (double)hist_n), c = 0;
    if (want < 1) want = 1;
    for (size_t i = 0; i < H_FINE + H_COARSE + 1; i++) {
        c += hist[i];
        if (c >= want) {
            if (i < H_FINE) return (i + 0.5) / 10.0;
            if (i < H_FINE + H_COARSE) return 2000.0 + (i - H_FINE + 0.5) * 10.0;
            return mx;
        }
    }
    return mx;
}

static inline void account(struct rstats *s, const uint8_t *payload, uint64_t t, double rel, double warmup) {
    uint64_t seq, ts;
    memcpy(&seq, payload, 8);
    memcpy(&ts, payload + 8, 8);
    uint64_t before = s->last_seq;
    s->received++;
    if (seq < s->last_seq) s->reordered++;
    s->last_seq = seq;
    if (seq > s->max_seq) s->max_seq = seq;
    if (rel < warmup) { s->last_ts = 0; return; }
    if (ts > s->last_ts) {
        if (s->last_ts && seq == before + 1) {
            double g = (double)(ts - s->last_ts) / 1000.0;
            s->gaps++; s->gsum += g; s->gsq += g * g;
            if (g > s->gmax) s->gmax = g;
            if (ts - s->last_ts >= XL_LONG_GAP_NS) s->glong++;
        }
        if (!s->last_ts) { s->first_ts = ts; s->first_seq = seq; }
        s->last_ts = ts;
        s->last_ts_seq = seq;
    }
    double us = ((double)t - (double)ts) / 1000.0;
    s->in_window++;
    s->sum += us; s->sq += us * us;
    hist_add(us);
    if (us < s->mn) s->mn = us;
    if (us > s->mx) s->mx = us;
}

static void report_recv(const char *path, const struct rstats *s) {
    double avg = s->in_window ? s->sum / s->in_window : 0;
    double var = s->in_window ? s->sq / s->in_window - avg * avg : 0;
    double gavg = s->gaps ? s->gsum / s->gaps : 0;
    double gvar = s->gaps ? s->gsq / s->gaps - gavg * gavg : 0;
    double span = s->first_ts && s->last_ts_seq > s->first_seq
                      ? (double)(s->last_ts - s->first_ts) / 1000.0 / (double)(s->last_ts_seq - s->first_seq) : 0;
    /* quantiles only where every latency went into the histogram (not the XDP sink) */
    char q[96] = "";
    if (hist_n && hist_n == s->in_window)
        snprintf(q, sizeof q, ", \"p50\": %.3f, \"p99\": %.3f", hist_q(0.5, s->mx), hist_q(0.99, s->mx));
    printf("{\"mode\": \"recv\", \"path\": \"%s\", \"received\": %llu, \"in_window\": %llu, \"max_seq\": %llu, "
           "\"reordered\": %llu, \"latency_us\": {\"min\": %.3f, \"avg\": %.3f, \"max\": %.3f, "
           "\"stdev\": %.3f%s}, \"send_gap_us\": {\"n\": %llu, \"avg\": %.3f, \"stdev\": %.3f, "
           "\"max\": %.3f, \"long\": %llu, \"per_frame\": %.3f}}\n", path, (unsigned long long)s->received, (unsigned long long)s->in_window,
           (unsigned long long)s->max_seq, (unsigned long long)s->reordered,
           s->in_window ? s->mn : 0, avg, s->mx, var > 0 ? sqrt(var) : 0, q,
           (unsigned long long)s->gaps, gavg, gvar > 0 ? sqrt(gvar) : 0, s->gmax,
           (unsigned long long)s->glong, span);
}

static int recv_udp(const struct args *a) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    /* 8 MB, past net.core.rmem_max where we may (root: SO_RCVBUFFORCE, a
     * per-socket setting): a receiver stalled for tens of ms (a busy CPU, an
     * emulated guest's vCPU) must not drop what the wire delivered. */
    int rcvbuf = 8 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->port),
                             .sin_addr.s_addr = INADDR_ANY};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { perror("bind"); return 1; }
    static uint8_t bufs[MAXBATCH][MAXFRAME];
    struct mmsghdr msgs[MAXBATCH];
    struct iovec iov[MAXBATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < MAXBATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = MAXFRAME;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    printf("{\"mode\": \"ready\"}\n");
    fflush(stdout);
    struct rstats s = {.mn = 1e18};
    double start = now_mono(), end = start + a->duration;
    while (!stop_flag && now_mono() < end) {
        int n = recvmmsg(fd, msgs, MAXBATCH, MSG_WAITFORONE, NULL);
        if (n <= 0) continue;
        uint64_t t = now_real_ns();
        double rel = now_mono() - start;
        for (int i = 0; i < n; i++)
            if (msgs[i].msg_len >= 16) account(&s, bufs[i], t, rel, a->warmup);
    }
    report_recv("udp", &s);
    return 0;
}

/* AF_PACKET TPACKET_V3 receive ring, filtered in the kernel to UDP frames for the port. */
static int recv_packet(const struct args *a) {
    if (!a->iface) die_usage("recv --mode packet needs --iface");
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IP));
    if (fd < 0) { perror("socket"); return 1; }
    /* ip[9] == 17 && udp dport == port (assumes a 20-byte IP header, which we send) */
    struct sock_filter code[] = {
        {0x30, 0, 0, 23},                         /* ldb [23] (IP proto)      */
        {0x15, 0, 3, 17},                         /* jeq #17 else drop        */
        {0x28, 0, 0, 36},                         /* ldh [36] (UDP dport)     */
        {0x15, 0, 1, (uint32_t)a->port},          /* jeq port else drop       */
        {0x06, 0, 0, 0xffffffff},                 /* accept                   */
        {0x06, 0, 0, 0},                          /* drop                     */
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    int v = TPACKET_V3;
    struct tpacket_req3 req = {.tp_block_size = 1 << 20, .tp_block_nr = 64, .tp_frame_size = 2048,
                               .tp_frame_nr = (1 << 20) / 2048 * 64, .tp_retire_blk_tov = 10};
    int ifindex = (int)if_nametoindex(a->iface);
    struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP), .sll_ifindex = ifindex};
    if (!ifindex || setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) { perror("packet ring"); return 1; }
    size_t ringsz = (size_t)req.tp_block_size * req.tp_block_nr;
    uint8_t *ring = mmap(NULL, ringsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
    if (ring == MAP_FAILED) ring = mmap(NULL, ringsz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED || bind(fd, (struct sockaddr *)&ll, sizeof ll) < 0) { perror("bind"); return 1; }
    printf("{\"mode\": \"ready\"}\n");
    fflush(stdout);
    struct rstats s = {.mn = 1e18};
    double start = now_mono(), end = start + a->duration;
    unsigned blk = 0;
    while (!stop_flag && now_mono() < end) {
        struct tpacket_block_desc *bd = (struct tpacket_block_desc *)(ring + (size_t)blk * req.tp_block_size);
        if (!(bd->hdr.bh1.block_status & TP_STATUS_USER)) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLERR};
            poll(&pfd, 1, 50);
            continue;
        }
        uint64_t t = now_real_ns();
        double rel = now_mono() - start;
        struct tpacket3_hdr *h = (struct tpacket3_hdr *)((uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt);
        for (uint32_t i = 0; i < bd->hdr.bh1.num_pkts; i++) {
            const uint8_t *pkt = (const uint8_t *)h + h->tp_mac;
            if (h->tp_snaplen >= HDRS + 16) account(&s, pkt + HDRS, t, rel, a->warmup);
            h = (struct tpacket3_hdr *)((uint8_t *)h + h->tp_next_offset);
        }
        bd->hdr.bh1.block_status = TP_STATUS_KERNEL;
        blk = (blk + 1) % req.tp_block_nr;
    }
    report_recv("packet", &s);
    munmap(ring, ringsz);
    close(fd);
    return 0;
}

/* An XDP program on the interface counts the stream and drops it (xdplive.c). */
static int recv_xdp(const struct args *a) {
    if (!a->iface) die_usage("recv --mode xdp needs --iface");
    int ifindex = (int)if_nametoindex(a->iface);
    if (!ifindex) { fprintf(stderr, "nslab-pktgen: no interface %s\n", a->iface); return 1; }
    struct xl_sink xs;
    const char *how = "";
    char why[300];
    if (xl_sink_open(&xs, ifindex, a->port, &how, why, sizeof why) < 0) {
        fprintf(stderr, "nslab-pktgen: recv --mode xdp: %s\n", why);
        return 1;
    }
    printf("{\"mode\": \"ready\", \"path\": \"xdp-%s\"}\n", how);
    fflush(stdout);
    volatile struct xdp_sink_stats *st = xs.stats;
    st->lat_mask = a->lat_every ? a->lat_every - 1 : 0;
    double start = now_mono(), end = start + a->duration;
    if (a->warmup <= 0) st->armed = 1;
    while (!stop_flag && now_mono() < end) {
        if (!st->armed && now_mono() - start >= a->warmup) st->armed = 1;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000};
        nanosleep(&ts, NULL);
    }
    close(xs.link_fd);   /* detach, then let a NAPI poll in progress finish */
    xs.link_fd = -1;
    struct timespec settle = {.tv_sec = 0, .tv_nsec = 20000000};
    nanosleep(&settle, NULL);
    struct xdp_sink_stats c = *xs.stats;
    struct rstats s = {.received = c.received, .in_window = c.in_window, .max_seq = c.max_seq,
                       .reordered = c.reordered, .sum = c.lat_sum / 1e3,
                       .sq = (double)c.lat_sq16 * 256.0 / 1e6,
                       .mn = c.in_window ? c.lat_min / 1e3 : 0, .mx = c.lat_max / 1e3,
                       .gaps = c.gaps, .gsum = c.gap_sum / 1e3,
                       .gsq = (double)c.gap_sq16 * 256.0 / 1e6, .gmax = c.gap_max / 1e3,
                       .glong = c.gap_long, .first_ts = c.first_ts, .first_seq = c.first_seq,
                       .last_ts = c.last_ts, .last_ts_seq = c.last_ts_seq};
    char path[32];
    snprintf(path, sizeof path, "xdp-%s", how);
    report_recv(path, &s);
    xl_sink_close(&xs);
    return 0;
}

/* ---- frame: print one frame in hex (tests) ---------------------------------------- */
static int do_frame(const struct args *a) {
    uint8_t smac[6], dmac[6], f[MAXFRAME];
    struct in_addr src, dst;
    if (parse_mac(a->src_mac, smac) < 0 || parse_mac(a->dst_mac, dmac) < 0) die_usage("bad MAC");
    if (!a->src || inet_pton(AF_INET, a->src, &src) != 1) die_usage("bad --src");
    if (!a->dst || inet_pton(AF_INET, a->dst, &dst) != 1) die_usage("bad --dst");
    size_t len = build_frame(f, a->size, smac, dmac, src, dst, a->port);
    stamp(f + HDRS, a->seq, a->ts);
    for (size_t i = 0; i < len; i++) printf("%02x", f[i]);
    printf("\n");
    return 0;
}

/* --cpu and --fifo: where and at what priority this process runs. */
static int place(const struct args *a) {
    if (a->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(a->cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            fprintf(stderr, "nslab-pktgen: --cpu %d: %s\n", a->cpu, strerror(errno));
            return -1;
        }
    }
    if (a->fifo) {
        struct sched_param sp = {.sched_priority = a->fifo};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
            fprintf(stderr, "nslab-pktgen: --fifo %d: %s\n", a->fifo, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) die_usage(NULL);
    struct args a;
    parse(argc, argv, &a);
    prctl(PR_SET_TIMERSLACK, 1UL);  /* sleep to the microsecond, not the default 50 us */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (place(&a) != 0) return 2;
    if (!strcmp(argv[1], "send")) {
        if (a.ready) {
            printf("{\"mode\": \"ready\"}\n");
            fflush(stdout);
        }
        return do_send(&a);
    }
    if (!strcmp(argv[1], "recv")) {
        if (!strcmp(a.mode, "packet")) return recv_packet(&a);
        if (!strcmp(a.mode, "xdp")) return recv_xdp(&a);
        if (strcmp(a.mode, "udp") && strcmp(a.mode, "auto")) die_usage("bad recv --mode (udp, packet, xdp)");
        return recv_udp(&a);
    }
    if (!strcmp(argv[1], "frame")) return do_frame(&a);
    die_usage("unknown command");
    return 2;
}
