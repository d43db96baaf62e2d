/*
 * nslab-pktgen's XDP paths, built on the bpf(2) system call alone (no libbpf,
 * no clang: the two programs are a few dozen instructions each, written out
 * below with the kernel's own instruction macros).
 *
 *   live   the generator: BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (Linux
 *          5.18+, the mechanism of xdp-tools' xdp-trafficgen). The kernel
 *          builds the frames itself from one template page, runs a small XDP
 *          program on each (it writes the sequence number and the send time)
 *          and redirects it to the interface: no socket, no skb on the
 *          sender. The receiving end must run NAPI (a veth peer with GRO on
 *          or an XDP program attached); otherwise the kernel drops the frames
 *          silently, which the generator detects from the interface's
 *          counters and reports.
 *   sink   an XDP program on the sink's interface counts the stream's frames
 *          (sequence, reordering, one-way latency, the gaps between send
 *          times) in a map and drops them there, before any skb exists. Other
 *          traffic passes. The program is attached through a bpf_link, so it
 *          goes when the process does, however it ends.
 */
#ifndef NSLAB_XDPLIVE_H
#define NSLAB_XDPLIVE_H

#include <stddef.h>
#include <stdint.h>

/* The sink's statistics, one array-map value shared with the program (mmap). */
struct xdp_sink_stats {
    uint64_t received, last_seq, max_seq, reordered;
    uint64_t armed;          /* set by user space after the warm-up */
    uint64_t clock_offset;   /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */
    uint64_t in_window, lat_sum, lat_sq16, lat_min, lat_max;
    uint64_t last_ts, gaps, gap_sum, gap_sq16, gap_max;  /* between seq n and n + 1 */
    uint64_t lat_mask;       /* latency of frames whose seq & lat_mask is 0 (a sample) */
    uint64_t gap_long;       /* gaps of XL_LONG_GAP_NS or more */
    /* the window's first and latest send times and their frames' seq: the mean
     * send gap over every frame sent between them, holes of lost frames included */
    uint64_t first_ts, first_seq, last_ts_seq;
};

/* A send gap this long or longer is counted apart: where a batch ended, or
 * where the sender's CPU was taken from it. A stall shows as one such gap in
 * a stream of even 5 us gaps, where its largest gap would be only the stall. */
#define XL_LONG_GAP_NS 100000

/* The generator's state: the next sequence number and the clock offset; with
 * gap_ns set, the program spaces frames itself (see xl_gen_open). */
struct xdp_gen_state {
    uint64_t seq;
    uint64_t clock_offset;
    uint64_t gap_ns;         /* 0: frames leave as fast as the kernel builds them */
    uint64_t next_ns;        /* CLOCK_MONOTONIC time the next frame is due */
    uint64_t catchup_ns;     /* a frame later than this restarts the schedule from now */
    uint64_t late_gap_ns;    /* the shortest gap, while behind schedule (catching up) */
    uint64_t earliest_ns;    /* the last frame's time + late_gap_ns */
};

/* The longest a spaced frame waits in the program (2,048 clock reads: tens of
 * microseconds); wider gaps are paced from user space. */
#define XL_SPIN_READS 2048

/* Realtime minus monotonic, ns: the programs read the monotonic clock and
 * stamp/compare CLOCK_REALTIME, as the socket paths do. */
uint64_t xl_clock_offset(void);

/* The generator. live_open loads the program for frames to ifindex and maps
 * its state; live_run sends n frames built from tmpl (len bytes); close frees. */
struct xl_gen { int prog_fd, map_fd, link_fd; struct xdp_gen_state *state; const uint8_t *tmpl; uint32_t len; };
int xl_gen_open(struct xl_gen *g, int ifindex, const uint8_t *tmpl, uint32_t len, char *why, size_t whylen);
/* batch: frames the kernel builds per batch before it flushes them to the
 * interface and lets softirqs run (0: the kernel's default, 256). */
int xl_gen_run(struct xl_gen *g, uint32_t n, uint32_t batch);
void xl_gen_close(struct xl_gen *g);

/* The sink on ifindex for UDP port; mode_out says "native" or "generic". */
struct xl_sink { int prog_fd, map_fd, link_fd; struct xdp_sink_stats *stats; };
int xl_sink_open(struct xl_sink *s, int ifindex, int port, const char **mode_out, char *why, size_t whylen);
void xl_sink_close(struct xl_sink *s);

#endif
