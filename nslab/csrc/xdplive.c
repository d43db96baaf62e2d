/* nslab-pktgen's XDP paths: see xdplive.h. */
#define _GNU_SOURCE
#include "xdplive.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- a tiny assembler: the kernel's instruction encoding, labels fixed up ---- */
#define INSN(c, d, s, o, i) ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define MOV_REG(d, s)      INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV_IMM(d, i)      INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ALU_IMM(op, d, i)  INSN(BPF_ALU64 | (op) | BPF_K, d, 0, 0, i)
#define ALU_REG(op, d, s)  INSN(BPF_ALU64 | (op) | BPF_X, d, s, 0, 0)
#define LDX(sz, d, s, o)   INSN(BPF_LDX | (sz) | BPF_MEM, d, s, o, 0)
#define STX(sz, d, s, o)   INSN(BPF_STX | (sz) | BPF_MEM, d, s, o, 0)
#define ST(sz, d, o, i)    INSN(BPF_ST | (sz) | BPF_MEM, d, 0, o, i)
#define J_IMM(op, d, i)    INSN(BPF_JMP | (op) | BPF_K, d, 0, 0, i)
#define J_REG(op, d, s)    INSN(BPF_JMP | (op) | BPF_X, d, s, 0, 0)
#define CALL(f)            INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT()             INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

enum { R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 };

#define MAXINSN 128
struct prog { struct bpf_insn i[MAXINSN]; int n, at[12], fix[32], to[32], nfix; };

/* A program longer than MAXINSN is kept whole in n (the extra dropped), and
 * prog_load refuses it in words rather than load a truncated one. */
static void emit(struct prog *p, struct bpf_insn i) { if (p->n < MAXINSN) p->i[p->n] = i; p->n++; }
static void jump(struct prog *p, struct bpf_insn i, int label) {
    p->fix[p->nfix] = p->n; p->to[p->nfix++] = label; emit(p, i);
}
static void label(struct prog *p, int l) { p->at[l] = p->n; }
static void ld_map(struct prog *p, int reg, int fd) {
    emit(p, INSN(BPF_LD | BPF_DW | BPF_IMM, reg, BPF_PSEUDO_MAP_FD, 0, fd));
    emit(p, INSN(0, 0, 0, 0, 0));
}
static void resolve(struct prog *p) {
    for (int k = 0; k < p->nfix; k++) p->i[p->fix[k]].off = (int16_t)(p->at[p->to[k]] - p->fix[k] - 1);
}
/* r6 = stats/state pointer, r(counter) += 1 at offset off: three instructions */
static void incr(struct prog *p, int base, int off) {
    emit(p, LDX(BPF_DW, R1, base, off));
    emit(p, ALU_IMM(BPF_ADD, R1, 1));
    emit(p, STX(BPF_DW, base, R1, off));
}

/* A running statistic of register val (never r1, r2, r6): its count n += 1,
 * sum += val, sq16 += (val >> 4)^2, with r6 the stats pointer. */
static void moments(struct prog *p, int val, int n, int sum, int sq16) {
    incr(p, R6, n);
    emit(p, LDX(BPF_DW, R1, R6, sum));
    emit(p, ALU_REG(BPF_ADD, R1, val));
    emit(p, STX(BPF_DW, R6, R1, sum));
    emit(p, MOV_REG(R2, val));
    emit(p, ALU_IMM(BPF_RSH, R2, 4));
    emit(p, ALU_REG(BPF_MUL, R2, R2));
    emit(p, LDX(BPF_DW, R1, R6, sq16));
    emit(p, ALU_REG(BPF_ADD, R1, R2));
    emit(p, STX(BPF_DW, R6, R1, sq16));
}

/* stats[off] = val if val is above it (op BPF_JGE) or below it (BPF_JLE);
 * else jump to skip, which the caller places right after. */
static void keep_extreme(struct prog *p, int val, int off, int op, int skip) {
    emit(p, LDX(BPF_DW, R1, R6, off));
    jump(p, J_REG(op, R1, val), skip);
    emit(p, STX(BPF_DW, R6, val, off));
}

/* ---- bpf(2) ------------------------------------------------------------------------- */
static long sys_bpf(int cmd, union bpf_attr *attr) { return syscall(__NR_bpf, cmd, attr, sizeof *attr); }

uint64_t xl_clock_offset(void) {
    struct timespec m0, r, m1;
    clock_gettime(CLOCK_MONOTONIC, &m0);
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m1);
    uint64_t mono = ((uint64_t)m0.tv_sec * 1000000000ull + (uint64_t)m0.tv_nsec +
                     (uint64_t)m1.tv_sec * 1000000000ull + (uint64_t)m1.tv_nsec) / 2;
    return (uint64_t)r.tv_sec * 1000000000ull + (uint64_t)r.tv_nsec - mono;
}

/* One array map of one mmap-able value: the program and user space share it. */
static int map_create(uint32_t value_size, void **mem, char *why, size_t whylen) {
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.map_type = BPF_MAP_TYPE_ARRAY;
    a.key_size = 4;
    a.value_size = value_size;
    a.max_entries = 1;
    a.map_flags = BPF_F_MMAPABLE;
    int fd = (int)sys_bpf(BPF_MAP_CREATE, &a);
    if (fd < 0) { snprintf(why, whylen, "bpf map: %s", strerror(errno)); return -1; }
    *mem = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*mem == MAP_FAILED) {
        snprintf(why, whylen, "bpf map mmap: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int prog_load(struct prog *p, char *why, size_t whylen) {
    static char log[8192];
    union bpf_attr a;
    if (p->n > MAXINSN) {
        snprintf(why, whylen, "XDP program of %d instructions, over this build's %d", p->n, MAXINSN);
        errno = E2BIG;
        return -1;
    }
    resolve(p);
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_XDP;
    a.insns = (uint64_t)(uintptr_t)p->i;
    a.insn_cnt = (uint32_t)p->n;
    a.license = (uint64_t)(uintptr_t)"GPL";
    /* Without a log first: the spacing loop makes the verifier's log of a
     * good program longer than any buffer worth keeping (ENOSPC). */
    int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
    if (fd >= 0) return fd;
    int e = errno;
    a.log_buf = (uint64_t)(uintptr_t)log;
    a.log_size = sizeof log;
    a.log_level = 1;
    log[0] = 0;
    if (sys_bpf(BPF_PROG_LOAD, &a) >= 0 || errno != ENOSPC) {}
    /* the verifier's last line says why (the log keeps its start when full) */
    size_t n = strlen(log);
    while (n && (log[n - 1] == '\n')) log[--n] = 0;
    char *last = strrchr(log, '\n');
    snprintf(why, whylen, "XDP program refused: %s%s%s", strerror(e), n ? ": " : "",
             last ? last + 1 : log);
    errno = e;
    return -1;
}

/* ---- the generator ------------------------------------------------------------------ */
#define PAYLOAD 42   /* Ethernet 14 + IPv4 20 + UDP 8: seq at +0, send time at +8 */
enum { L_DROP, L_PASS, L_NOREORD, L_NOMAX, L_LATOK, L_NOMIN, L_NOLMAX, L_NOLONG, L_LATER };
enum { L_NOW = L_NOREORD, L_TARGET, L_SPIN, L_DUE, L_NOLAG, L_STAMP };

int xl_gen_open(struct xl_gen *g, int ifindex, const uint8_t *tmpl, uint32_t len, char *why, size_t whylen) {
    memset(g, 0, sizeof *g);
    g->prog_fd = g->map_fd = g->link_fd = -1;
    void *mem;
    g->map_fd = map_create(sizeof(struct xdp_gen_state), &mem, why, whylen);
    if (g->map_fd < 0) return -1;
    g->state = mem;
    g->state->seq = 0;
    g->state->clock_offset = xl_clock_offset();
    struct prog p = {.n = 0};
    emit(&p, MOV_REG(R6, R1));
    /* Frames that arrive on the interface (the program is also attached
     * there, see below) pass untouched: only BPF_PROG_RUN's frames are ours. */
    emit(&p, LDX(BPF_W, R2, R6, offsetof(struct xdp_md, ingress_ifindex)));
    jump(&p, J_IMM(BPF_JEQ, R2, ifindex), L_PASS);
    emit(&p, LDX(BPF_W, R2, R6, offsetof(struct xdp_md, data)));
    emit(&p, LDX(BPF_W, R3, R6, offsetof(struct xdp_md, data_end)));
    emit(&p, MOV_REG(R4, R2));
    emit(&p, ALU_IMM(BPF_ADD, R4, PAYLOAD + 16));
    jump(&p, J_REG(BPF_JGT, R4, R3), L_DROP);            /* too short: not ours */
    emit(&p, MOV_REG(R7, R2));                           /* r7 = the frame */
    emit(&p, ST(BPF_W, R10, -4, 0));                     /* key 0 */
    emit(&p, MOV_REG(R2, R10));
    emit(&p, ALU_IMM(BPF_ADD, R2, -4));
    ld_map(&p, R1, g->map_fd);
    emit(&p, CALL(BPF_FUNC_map_lookup_elem));
    jump(&p, J_IMM(BPF_JEQ, R0, 0), L_DROP);
    emit(&p, MOV_REG(R8, R0));                           /* r8 = state */
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, seq)));
    emit(&p, STX(BPF_DW, R7, R1, PAYLOAD));              /* the frame's sequence number */
    emit(&p, ALU_IMM(BPF_ADD, R1, 1));
    emit(&p, STX(BPF_DW, R8, R1, offsetof(struct xdp_gen_state, seq)));
    /* Spacing: with gap_ns set, wait (reading the clock, at most XL_SPIN_READS
     * times) until the frame is due and at least late_gap after the last one;
     * then due += gap. So after a stall the backlog goes out at a bounded
     * higher rate, not as a burst, and the mean rate stays exact. A frame
     * later than catchup_ns restarts the schedule from now. */
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, gap_ns)));
    jump(&p, J_IMM(BPF_JEQ, R1, 0), L_NOW);
    emit(&p, LDX(BPF_DW, R9, R8, offsetof(struct xdp_gen_state, next_ns)));
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, earliest_ns)));
    jump(&p, J_REG(BPF_JGE, R9, R1), L_TARGET);
    emit(&p, MOV_REG(R9, R1));                           /* r9 = max(due, earliest) */
    label(&p, L_TARGET);
    emit(&p, MOV_IMM(R6, XL_SPIN_READS));                /* r6 = reads left */
    label(&p, L_SPIN);
    emit(&p, CALL(BPF_FUNC_ktime_get_ns));
    jump(&p, J_REG(BPF_JGE, R0, R9), L_DUE);
    emit(&p, ALU_IMM(BPF_ADD, R6, -1));
    jump(&p, J_IMM(BPF_JNE, R6, 0), L_SPIN);
    label(&p, L_DUE);                                    /* r0 = now */
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, late_gap_ns)));
    emit(&p, ALU_REG(BPF_ADD, R1, R0));
    emit(&p, STX(BPF_DW, R8, R1, offsetof(struct xdp_gen_state, earliest_ns)));
    emit(&p, LDX(BPF_DW, R9, R8, offsetof(struct xdp_gen_state, next_ns)));
    emit(&p, MOV_REG(R2, R0));
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, catchup_ns)));
    emit(&p, ALU_REG(BPF_SUB, R2, R1));
    jump(&p, J_REG(BPF_JGE, R9, R2), L_NOLAG);
    emit(&p, MOV_REG(R9, R0));                           /* too late: from now on */
    label(&p, L_NOLAG);
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, gap_ns)));
    emit(&p, ALU_REG(BPF_ADD, R9, R1));
    emit(&p, STX(BPF_DW, R8, R9, offsetof(struct xdp_gen_state, next_ns)));
    jump(&p, J_IMM(BPF_JA, R0, 0), L_STAMP);
    label(&p, L_NOW);
    emit(&p, CALL(BPF_FUNC_ktime_get_ns));
    label(&p, L_STAMP);
    emit(&p, LDX(BPF_DW, R1, R8, offsetof(struct xdp_gen_state, clock_offset)));
    emit(&p, ALU_REG(BPF_ADD, R0, R1));
    emit(&p, STX(BPF_DW, R7, R0, PAYLOAD + 8));          /* its send time, CLOCK_REALTIME ns */
    emit(&p, MOV_IMM(R1, ifindex));
    emit(&p, MOV_IMM(R2, 0));
    emit(&p, CALL(BPF_FUNC_redirect));                   /* out of the interface */
    emit(&p, EXIT());
    label(&p, L_DROP);
    emit(&p, MOV_IMM(R0, XDP_DROP));
    emit(&p, EXIT());
    label(&p, L_PASS);
    emit(&p, MOV_IMM(R0, XDP_PASS));
    emit(&p, EXIT());
    g->prog_fd = prog_load(&p, why, whylen);
    if (g->prog_fd < 0) { int e = errno; xl_gen_close(g); errno = e; return -1; }
    g->tmpl = tmpl;
    g->len = len;
    /* Each live BPF_PROG_RUN puts the program into the kernel's XDP dispatcher
     * and takes it out again, and each change waits for an RCU grace period
     * (milliseconds on a busy VM): paced runs of a few frames would spend all
     * their time there. A program already attached in native mode stays in the
     * dispatcher, so attach it to the sending interface for the process's
     * life (a bpf_link; frames arriving there pass). Best effort: without it
     * the path works, only slower per call. */
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.link_create.prog_fd = (uint32_t)g->prog_fd;
    a.link_create.target_ifindex = (uint32_t)ifindex;
    a.link_create.attach_type = BPF_XDP;
    a.link_create.flags = XDP_FLAGS_DRV_MODE;
    g->link_fd = (int)sys_bpf(BPF_LINK_CREATE, &a);
    return 0;
}

int xl_gen_run(struct xl_gen *g, uint32_t n, uint32_t batch) {
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.test.prog_fd = (uint32_t)g->prog_fd;
    a.test.data_in = (uint64_t)(uintptr_t)g->tmpl;
    a.test.data_size_in = g->len;
    a.test.repeat = n;
    a.test.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
    a.test.batch_size = batch;
    return (int)sys_bpf(BPF_PROG_TEST_RUN, &a);
}

void xl_gen_close(struct xl_gen *g) {
    if (g->link_fd >= 0) close(g->link_fd);
    if (g->prog_fd >= 0) close(g->prog_fd);
    if (g->state) munmap(g->state, (size_t)sysconf(_SC_PAGESIZE));
    if (g->map_fd >= 0) close(g->map_fd);
    g->prog_fd = g->map_fd = g->link_fd = -1;
    g->state = NULL;
}

/* ---- the sink ----------------------------------------------------------------------- */
#define S(field) ((int)offsetof(struct xdp_sink_stats, field))

int xl_sink_open(struct xl_sink *s, int ifindex, int port, const char **mode_out, char *why, size_t whylen) {
    memset(s, 0, sizeof *s);
    s->prog_fd = s->map_fd = s->link_fd = -1;
    void *mem;
    s->map_fd = map_create(sizeof(struct xdp_sink_stats), &mem, why, whylen);
    if (s->map_fd < 0) return -1;
    s->stats = mem;
    memset(s->stats, 0, sizeof *s->stats);
    s->stats->lat_min = UINT64_MAX;
    s->stats->clock_offset = xl_clock_offset();
    struct prog p = {.n = 0};
    emit(&p, MOV_REG(R6, R1));
    emit(&p, LDX(BPF_W, R2, R6, offsetof(struct xdp_md, data)));
    emit(&p, LDX(BPF_W, R3, R6, offsetof(struct xdp_md, data_end)));
    emit(&p, MOV_REG(R4, R2));
    emit(&p, ALU_IMM(BPF_ADD, R4, PAYLOAD + 16));
    jump(&p, J_REG(BPF_JGT, R4, R3), L_PASS);
    /* IPv4 (0x0800, read little-endian), a 20-byte header, UDP, our port: else pass */
    emit(&p, LDX(BPF_H, R4, R2, 12));
    jump(&p, J_IMM(BPF_JNE, R4, 0x0008), L_PASS);
    emit(&p, LDX(BPF_B, R4, R2, 14));
    jump(&p, J_IMM(BPF_JNE, R4, 0x45), L_PASS);
    emit(&p, LDX(BPF_B, R4, R2, 23));
    jump(&p, J_IMM(BPF_JNE, R4, 17), L_PASS);
    emit(&p, LDX(BPF_H, R4, R2, 36));
    jump(&p, J_IMM(BPF_JNE, R4, htons((uint16_t)port)), L_PASS);
    emit(&p, LDX(BPF_DW, R8, R2, PAYLOAD));              /* r8 = seq */
    emit(&p, LDX(BPF_DW, R9, R2, PAYLOAD + 8));          /* r9 = send time */
    emit(&p, ST(BPF_W, R10, -4, 0));
    emit(&p, MOV_REG(R2, R10));
    emit(&p, ALU_IMM(BPF_ADD, R2, -4));
    ld_map(&p, R1, s->map_fd);
    emit(&p, CALL(BPF_FUNC_map_lookup_elem));
    jump(&p, J_IMM(BPF_JEQ, R0, 0), L_DROP);
    emit(&p, MOV_REG(R6, R0));                           /* r6 = stats */
    incr(&p, R6, S(received));
    emit(&p, LDX(BPF_DW, R1, R6, S(last_seq)));          /* reordered: seq below the last one */
    jump(&p, J_REG(BPF_JGE, R8, R1), L_NOREORD);
    incr(&p, R6, S(reordered));
    label(&p, L_NOREORD);
    emit(&p, LDX(BPF_DW, R7, R6, S(last_seq)));          /* r7 = the frame before's seq */
    emit(&p, STX(BPF_DW, R6, R8, S(last_seq)));
    emit(&p, LDX(BPF_DW, R1, R6, S(max_seq)));
    jump(&p, J_REG(BPF_JGE, R1, R8), L_NOMAX);
    emit(&p, STX(BPF_DW, R6, R8, S(max_seq)));
    label(&p, L_NOMAX);
    emit(&p, LDX(BPF_DW, R1, R6, S(armed)));             /* latency and gaps after the warm-up */
    jump(&p, J_IMM(BPF_JEQ, R1, 0), L_DROP);
    /* One-way latency of a sample (seq & lat_mask == 0): the clock read is a
     * large share of the sink's cost per frame at millions of frames/s. */
    emit(&p, LDX(BPF_DW, R1, R6, S(lat_mask)));
    emit(&p, ALU_REG(BPF_AND, R1, R8));
    jump(&p, J_IMM(BPF_JNE, R1, 0), L_NOLMAX);
    emit(&p, CALL(BPF_FUNC_ktime_get_ns));
    emit(&p, LDX(BPF_DW, R1, R6, S(clock_offset)));
    emit(&p, ALU_REG(BPF_ADD, R0, R1));
    emit(&p, ALU_REG(BPF_SUB, R0, R9));                  /* r0 = one-way latency, ns */
    jump(&p, J_IMM(BPF_JSGE, R0, 0), L_LATOK);
    emit(&p, MOV_IMM(R0, 0));
    label(&p, L_LATOK);
    moments(&p, R0, S(in_window), S(lat_sum), S(lat_sq16));
    keep_extreme(&p, R0, S(lat_min), BPF_JLE, L_NOMIN);
    label(&p, L_NOMIN);
    keep_extreme(&p, R0, S(lat_max), BPF_JGE, L_NOLMAX);
    label(&p, L_NOLMAX);
    /* the gaps between successive send times (a later one than any before),
     * of frames that left one after the other: not across frames lost on
     * the way, whose hole is the receiver's stall, not the sender's pacing */
    emit(&p, LDX(BPF_DW, R1, R6, S(last_ts)));
    jump(&p, J_REG(BPF_JGE, R1, R9), L_DROP);
    emit(&p, STX(BPF_DW, R6, R9, S(last_ts)));
    emit(&p, STX(BPF_DW, R6, R8, S(last_ts_seq)));
    jump(&p, J_IMM(BPF_JNE, R1, 0), L_LATER);
    emit(&p, STX(BPF_DW, R6, R9, S(first_ts)));          /* the window's first send time */
    emit(&p, STX(BPF_DW, R6, R8, S(first_seq)));
    jump(&p, J_IMM(BPF_JA, R0, 0), L_DROP);
    label(&p, L_LATER);
    emit(&p, ALU_IMM(BPF_ADD, R7, 1));
    jump(&p, J_REG(BPF_JNE, R7, R8), L_DROP);
    emit(&p, MOV_REG(R7, R9));
    emit(&p, ALU_REG(BPF_SUB, R7, R1));                  /* r7 = gap, ns */
    moments(&p, R7, S(gaps), S(gap_sum), S(gap_sq16));
    jump(&p, J_IMM(BPF_JLT, R7, XL_LONG_GAP_NS), L_NOLONG);
    incr(&p, R6, S(gap_long));
    label(&p, L_NOLONG);
    keep_extreme(&p, R7, S(gap_max), BPF_JGE, L_DROP);
    label(&p, L_DROP);
    emit(&p, MOV_IMM(R0, XDP_DROP));
    emit(&p, EXIT());
    label(&p, L_PASS);
    emit(&p, MOV_IMM(R0, XDP_PASS));
    emit(&p, EXIT());
    s->prog_fd = prog_load(&p, why, whylen);
    if (s->prog_fd < 0) { int e = errno; xl_sink_close(s); errno = e; return -1; }
    /* A bpf_link: the program goes when this process does, however it ends.
     * Native (driver) mode first: veth has it, and it turns the veth's NAPI on. */
    static const struct { uint32_t flag; const char *name; } modes[] = {
        {XDP_FLAGS_DRV_MODE, "native"}, {XDP_FLAGS_SKB_MODE, "generic"}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        union bpf_attr a;
        memset(&a, 0, sizeof a);
        a.link_create.prog_fd = (uint32_t)s->prog_fd;
        a.link_create.target_ifindex = (uint32_t)ifindex;
        a.link_create.attach_type = BPF_XDP;
        a.link_create.flags = modes[m].flag;
        s->link_fd = (int)sys_bpf(BPF_LINK_CREATE, &a);
        if (s->link_fd >= 0) { *mode_out = modes[m].name; return 0; }
    }
    int e = errno;
    snprintf(why, whylen, "attaching the XDP sink: %s", strerror(e));
    xl_sink_close(s);
    errno = e;
    return -1;
}

void xl_sink_close(struct xl_sink *s) {
    if (s->link_fd >= 0) close(s->link_fd);   /* detaches the program */
    if (s->prog_fd >= 0) close(s->prog_fd);
    if (s->stats) munmap(s->stats, (size_t)sysconf(_SC_PAGESIZE));
    if (s->map_fd >= 0) close(s->map_fd);
    s->link_fd = s->prog_fd = s->map_fd = -1;
    s->stats = NULL;
}
