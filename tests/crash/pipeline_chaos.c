/* SPDX-License-Identifier: MIT */
/*
 * The kill storm over a whole instance (pipeline_chaos.h): clients, the
 * supervisor loop, kills and restarts, the drain and the audit.
 * Part of rs_testlib, linked by the tests and benches that include the header.
 */
#include "tests/crash/pipeline_chaos.h"

void pchaos_opts_default(struct pchaos_opts *o, const char *model)
{
    memset(o, 0, sizeof(*o));
    o->model = model;
    o->n_ctx = 512;
    o->n_clients = 8;
    o->per_client = 2;
    o->n_kinds = 24;
    o->max_output = 160;
    o->kill_min_ms = 200;
    o->kill_max_ms = 800;
    o->stage_mask = 0xf;
    o->failpoint_pct = 25;
    /* Clients release their records at the final; the linger is the backstop for a release
     * lost with a killed postprocd: above the client's 8 s resume backoff, short enough that
     * the audit after the drain need not wait postprocd's 30 s default. */
    o->linger_ms = "10000";
    o->constrained_every = 3;
    o->seed = 1;
}

/* Constraints for stories260K (512 tokens); static: the kinds borrow them. */
static const char *const chaos_choices[] = {"yes", "no", "the end", "Once upon a time"};
static struct rs_wire_bias chaos_bias[PCHAOS_MAX_KINDS][3];
static uint32_t chaos_allowed[PCHAOS_MAX_KINDS][6];

void pchaos_constrain(struct rs_wire_generate *g, uint32_t i)
{
    uint32_t which = i % 5;
    if (which == 4) {
        for (uint32_t j = 0; j < 3; j++)
            chaos_bias[i][j] = (struct rs_wire_bias){(i * 17 + j * 101) % 500 + 5,
                                                     j == 0 ? -100.0f : 4.0f - 3.0f * j};
        for (uint32_t j = 0; j < 6; j++)
            chaos_allowed[i][j] = (i * 29 + j * 61) % 500 + 5;
        g->has |= RS_WIRE_GEN_LOGIT_BIAS | (i % 2 ? RS_WIRE_GEN_ALLOWED_TOKEN_IDS : 0);
        g->cx.n_bias = 3;
        g->cx.bias = chaos_bias[i];
        if (i % 2)
            g->cx.allowed = (struct rs_wire_ids){.n = 6, .vals = chaos_allowed[i]};
        return;
    }
    static const char *const text[] = {"[a-z ]{5,60}\\.", NULL, NULL,
                                       "root ::= [a-z]+ (\" \" [a-z]+){0,12} \".\"\n"};
    static const enum rs_wire_cx_kind kinds[] = {RS_WIRE_CX_REGEX, RS_WIRE_CX_CHOICE,
                                                 RS_WIRE_CX_JSON_OBJECT, RS_WIRE_CX_GBNF};
    g->has |= RS_WIRE_GEN_CONSTRAINT;
    g->cx.kind = kinds[which];
    if (text[which] != NULL)
        g->cx.text = (struct rs_wire_str){text[which], (uint32_t)strlen(text[which])};
    if (g->cx.kind == RS_WIRE_CX_CHOICE) {
        g->cx.n_choices = 4;
        for (uint32_t j = 0; j < 4; j++)
            g->cx.choices[j] = (struct rs_wire_str){chaos_choices[j],
                                                    (uint32_t)strlen(chaos_choices[j])};
    }
}

uint64_t pchaos_rand(struct pchaos *c)
{
    c->rng ^= c->rng << 13, c->rng ^= c->rng >> 7, c->rng ^= c->rng << 17;
    return c->rng;
}

void pchaos_sample(struct pchaos_samples *s, uint64_t v)
{
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        uint64_t *nv = realloc(s->v, cap * sizeof(uint64_t));
        if (nv == NULL)
            return;
        s->v = nv, s->cap = cap;
    }
    s->v[s->n++] = v;
}

int pchaos_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double pchaos_quantile_ms(struct pchaos_samples *s, double q)
{
    if (s->n == 0)
        return 0;
    qsort(s->v, s->n, sizeof(uint64_t), pchaos_cmp_u64);
    uint32_t k = (uint32_t)(q * (double)s->n + 0.999999);
    k = k == 0 ? 1 : k > s->n ? s->n : k;
    return (double)s->v[k - 1] / 1e6;
}

void pchaos_report_mismatch(const struct pchaos_req *q, const struct solo_out *ref)
{
    const struct rs_client_result *r = &q->s.res;
    fprintf(stderr,
            "chaos: request kind %u on client %u: status %s (%s: %s), finish %s (solo "
            "%s), %u tokens (solo %u), %u deltas, %u finals, out of order %d\n"
            "  got:  %s\n  solo: %s\n",
            q->kind, q->client, rs_client_status_name(r->status), rs_wire_code_name(r->error),
            r->message, rs_wire_finish_name(r->finish_reason), rs_wire_finish_name(ref->finish),
            r->n_tokens, ref->n_tokens, q->s.n_deltas, q->s.n_finals, q->s.out_of_order,
            r->text != NULL ? r->text : "", ref->text);
}

void pchaos_account(struct pchaos *c, struct pchaos_req *q)
{
    const struct solo_out *ref = &c->refs[q->kind];
    const struct rs_client_result *r = &q->s.res;
    int stream = c->kinds[q->kind].stream;
    int same = r->n_tokens == ref->n_tokens &&
               memcmp(r->tokens, ref->tokens, ref->n_tokens * sizeof(int32_t)) == 0 &&
               r->text_len == ref->text_len && memcmp(r->text, ref->text, ref->text_len) == 0 &&
               r->finish_reason == ref->finish && r->usage.completion_tokens == ref->n_tokens &&
               (stream || q->s.n_deltas == 0);
    uint64_t bad = c->lost + c->duplicated + c->wrong;
    if (r->status != RS_CLIENT_OK)
        c->lost++;
    else if (q->s.out_of_order || q->s.n_finals != 1)
        c->duplicated++;
    else if (!same)
        c->wrong++;
    else
        c->completed++;
    if (c->lost + c->duplicated + c->wrong > bad && bad < PCHAOS_REPORT_MAX)
        pchaos_report_mismatch(q, ref);
}

void pchaos_on_event(const struct rs_client_event *ev)
{
    struct pchaos_req *q = ev->user;
    stream_rec_add(&q->s, ev); /* a repeat or a gap reaching the application is out of order */
    if (ev->kind != RS_CLIENT_EV_FINAL)
        return;
    pchaos_account(q->ch, q);
    rs_client_result_fini(&q->s.res);
    q->busy = 0;
    q->ch->in_flight[q->client]--;
}

void pchaos_top_up(struct pchaos *c)
{
    for (uint32_t i = 0; i < c->n_slots && c->submitting; i++) {
        struct pchaos_req *q = &c->reqs[i];
        if (q->busy)
            continue;
        memset(q, 0, sizeof(*q));
        q->ch = c;
        q->client = i / c->o.per_client;
        q->kind = (uint32_t)(pchaos_rand(c) % c->o.n_kinds);
        if (rs_client_submit(c->clients[q->client], &c->kinds[q->kind], NULL, pchaos_on_event, q,
                             NULL) != RS_OK)
            continue;
        q->busy = 1;
        c->in_flight[q->client]++;
        c->submitted++;
    }
}

static const char *const pchaos_failpoints[RS_PIPE_N_STAGES][8] = {
    {"table.claim.after_cas", "arena.append.written", "arena.append.after_publish",
     "role.start.after_fence", NULL},
    {"sched.batch.marked", "sched.batch.committed", "sched.apply.row", "sched.apply.done",
     "sched.finish.moved", "sched.admit.row", "sched.kv.register", "sched.rebuild.record"},
    {"launcher.step.after_forward", "launcher.row.after_append", "launcher.result.before_commit",
     "launcher.result.after_commit", "ring.release.before", "arena.append.before_publish",
     "ring.recover.prod.floor", NULL},
    {"postprocd.delta_sent", "postprocd.cursor_copied", "postprocd.final_sent",
     "arena.free.after_record", "role.start.after_fence", NULL},
};

int pchaos_spawn(struct pchaos *c, enum rs_pipe_stage s, uint64_t kill_ns,
                 const char *env_spec)
{
    struct pchaos_stage *st = &c->st[s];
    snprintf(st->env, sizeof(st->env), "%s", env_spec);
    st->armed += st->env[0] != '\0';
    st->kill_ns = kill_ns;
    st->spawn_ns = rs_clock_ns();
    st->awaiting_ready = 1;
    st->starts++;
    if (rs_harness_start_stage(&c->h, s, st->env[0] ? st->env : NULL, 0) != RS_OK) {
        fprintf(stderr, "chaos: cannot start %s\n", rs_pipe_stage_name(s));
        return 1;
    }
    return 0;
}

int pchaos_restart(struct pchaos *c, enum rs_pipe_stage s, uint64_t kill_ns)
{
    char env[128] = "";
    if (pchaos_rand(c) % 100 < c->o.failpoint_pct) {
        uint32_t n = 0;
        while (n < 8 && pchaos_failpoints[s][n] != NULL)
            n++;
        const char *label = pchaos_failpoints[s][pchaos_rand(c) % n];
        unsigned pass = strncmp(label, "role.", 5) == 0 || strncmp(label, "ring.recover", 12) == 0
                            ? 1
                            : 1 + (unsigned)(pchaos_rand(c) % 40);
        snprintf(env, sizeof(env), "RS_FAILPOINT=%s:%u", label, pass);
    }
    return pchaos_spawn(c, s, kill_ns, env);
}

int pchaos_supervise(struct pchaos *c)
{
    for (int i = 0; i < RS_PIPE_N_STAGES; i++) {
        enum rs_pipe_stage s = (enum rs_pipe_stage)i;
        struct pchaos_stage *st = &c->st[s];
        uint64_t ready = st->awaiting_ready ? rs_harness_ready_ns(&c->h, s) : 0;
        if (ready != 0) {
            st->awaiting_ready = 0;
            if (st->kill_ns != 0)
                pchaos_sample(&st->restart, ready - st->kill_ns);
            pchaos_sample(&st->exec, ready - st->spawn_ns);
        }
        int code = rs_harness_wait_exit(&c->h, s, 0);
        if (code < 0)
            continue;
        if (code == 128 + SIGKILL && st->env[0] != '\0') {
            st->failpoint_deaths++;
        } else {
            st->unexpected++;
            fprintf(stderr, "chaos: %s exited with status %d by itself (%s)\n",
                    rs_pipe_stage_name(s), code, st->env[0] ? st->env : "no failpoint");
            rs_harness_dump_logs(&c->h, s);
        }
        if (pchaos_restart(c, s, 0) != 0)
            return 1;
    }
    return 0;
}

uint64_t pchaos_unacked(const struct pchaos *c)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < c->o.n_clients && c->clients[i] != NULL; i++) {
        struct rs_client_stats st;
        rs_client_stats(c->clients[i], &st);
        n += st.submitted - st.acked;
    }
    return n;
}

int pchaos_busy(struct pchaos *c, enum rs_pipe_stage s)
{
    struct rs_pipe *v = rs_harness_view(&c->h);
    struct rs_ring_stats b, r;
    if (v == NULL || s == RS_PIPE_STAGE_TOKENIZERD)
        return v != NULL && pchaos_unacked(c) > 0;
    if (s != RS_PIPE_STAGE_POSTPROCD) {
        if (rs_ring_check(v->batches, &b) != RS_OK || rs_ring_check(v->results, &r) != RS_OK)
            return 0;
        uint64_t held = b.n_state[RS_RING_READING] + b.n_state[RS_RING_IN_FLIGHT];
        return s == RS_PIPE_STAGE_LAUNCHERD
                   ? held > 0
                   : held + b.n_state[RS_RING_COMMITTED] + r.n_state[RS_RING_COMMITTED] > 0;
    }
    uint32_t cursor = 0, state;
    struct rs_table_ref ref;
    while (rs_table_next(v->requests, &cursor, 1ull << RS_PIPE_REQ_RUNNING, &ref, &state) ==
           RS_OK) {
        struct rs_pipe_req *q = rs_pipe_req_at(v, ref.index);
        struct rs_pipe_cursor *cur = rs_pipe_cursor_cur(q);
        if ((q->flags & RS_PIPE_F_STREAM) && cur->n_done > 0 && !cur->final_sent)
            return 1;
    }
    return 0;
}

/* A published record's (client, id) as a 64-bit FNV-1a hash, with its index. */
struct live_key {
    uint64_t hash;
    struct rs_table_ref ref;
};

static int live_key_cmp(const void *a, const void *b)
{
    const struct live_key *x = a, *y = b;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* 1 when the record of ref is still published under that generation (read after its fields:
 * a record freed and reused meanwhile may have been read half-rewritten). */
static int still_published(struct rs_pipe *v, struct rs_table_ref ref)
{
    uint32_t state, gen, owner;
    rs_table_peek(v->requests, ref.index, &state, &gen, &owner);
    return gen == ref.gen && state >= RS_PIPE_REQ_WAITING && state <= RS_PIPE_REQ_FINISHED;
}

static int same_request(struct rs_pipe *v, struct rs_table_ref x, struct rs_table_ref y)
{
    const struct rs_pipe_req *a = rs_pipe_req_at(v, x.index), *b = rs_pipe_req_at(v, y.index);
    int same = a->client_len == b->client_len &&
               memcmp(a->client, b->client, a->client_len) == 0 &&
               strncmp(a->id, b->id, sizeof(a->id)) == 0;
    return same && still_published(v, x) && still_published(v, y);
}

void pchaos_scan_twice(struct pchaos *c)
{
    struct rs_pipe *v = rs_harness_view(&c->h);
    static struct live_key keys[1u << 16];
    if (v == NULL || rs_table_size(v->requests) > sizeof(keys) / sizeof(keys[0]))
        return;
    uint32_t cursor = 0, state, n = 0;
    struct rs_table_ref ref;
    uint64_t published = (1ull << RS_PIPE_REQ_WAITING) | (1ull << RS_PIPE_REQ_RUNNING) |
                         (1ull << RS_PIPE_REQ_FINISHED);
    while (rs_table_next(v->requests, &cursor, published, &ref, &state) == RS_OK) {
        const struct rs_pipe_req *q = rs_pipe_req_at(v, ref.index);
        uint64_t h = fnv(0xcbf29ce484222325ull, q->client, q->client_len);
        keys[n++] = (struct live_key){fnv(h, q->id, strnlen(q->id, sizeof(q->id))), ref};
    }
    qsort(keys, n, sizeof(keys[0]), live_key_cmp);
    for (uint32_t i = 1; i < n; i++)
        if (keys[i].hash == keys[i - 1].hash && same_request(v, keys[i].ref, keys[i - 1].ref))
            c->twice_live++;
}

int pchaos_accepted_once(struct pchaos *c)
{
    const struct pchaos_stage *tok = &c->st[RS_PIPE_STAGE_TOKENIZERD];
    uint64_t spare = (uint64_t)tok->kills + tok->failpoint_deaths + tok->fenced_exits;
    uint64_t handles = pchaos_accepted(c);
    int once = c->twice_live == 0 && handles >= c->submitted && handles <= c->submitted + spare;
    if (!once)
        fprintf(stderr, "chaos: %llu handles for %llu requests (at most %llu unused allowed), "
                "%llu scans saw a request published twice\n", (unsigned long long)handles,
                (unsigned long long)c->submitted, (unsigned long long)spare,
                (unsigned long long)c->twice_live);
    return once;
}

int pchaos_poll(struct pchaos *c, uint32_t ms)
{
    uint64_t end = rs_clock_ms() + ms;
    do {
        pchaos_top_up(c);
        pchaos_scan_twice(c);
        if (rs_client_poll_set(c->clients, c->o.n_clients, ms < 5 ? (int)ms : 5) < 0 ||
            pchaos_supervise(c) != 0)
            return 1;
    } while (rs_clock_ms() < end);
    return 0;
}

int pchaos_kill(struct pchaos *c, enum rs_pipe_stage s)
{
    struct pchaos_stage *st = &c->st[s];
    int busy = 0;
    for (uint64_t end = rs_clock_ms() + 100; !(busy = pchaos_busy(c, s)) && rs_clock_ms() < end;) {
        pchaos_top_up(c);
        if (rs_client_poll_set(c->clients, c->o.n_clients, 1) < 0)
            return 1;
    }
    int recovering = rs_harness_ready_ns(&c->h, s) == 0;
    uint64_t t = rs_clock_ns();
    rs_harness_signal(&c->h, s, SIGKILL);
    st->kills++;
    st->kills_busy += busy;
    st->kills_recovering += recovering;
    if (c->o.verbose)
        fprintf(stderr, "chaos: %6.1f s kill %s%s%s\n",
                (double)(rs_clock_ms() - c->started_ms) / 1000, rs_pipe_stage_name(s),
                busy ? " (busy)" : "", recovering ? " (recovering)" : "");
    return pchaos_restart(c, s, recovering ? 0 : t);
}

enum rs_pipe_stage pchaos_next_stage(struct pchaos *c)
{
    if (c->order_pos == c->n_order) {
        c->n_order = 0;
        for (int s = 0; s < RS_PIPE_N_STAGES; s++)
            if (c->o.stage_mask & (1u << s))
                c->order[c->n_order++] = (uint32_t)s;
        for (uint32_t i = c->n_order; i > 1; i--) {
            uint32_t j = (uint32_t)(pchaos_rand(c) % i), t = c->order[i - 1];
            c->order[i - 1] = c->order[j], c->order[j] = t;
        }
        c->order_pos = 0;
    }
    return (enum rs_pipe_stage)c->order[c->order_pos++];
}

int pchaos_start(struct pchaos *c, const struct pchaos_opts *o)
{
    struct solo_ref s;
    memset(c, 0, sizeof(*c));
    c->o = *o;
    c->rng = o->seed * 2654435761u + 1;
    if (o->n_clients == 0 || o->n_clients > PCHAOS_MAX_CLIENTS || o->n_kinds == 0 ||
        o->n_kinds > PCHAOS_MAX_KINDS || o->per_client == 0 || solo_open(&s, o->model, o->n_ctx))
        return 1;
    int failed = 0;
    for (uint32_t i = 0; i < o->n_kinds && !failed; i++) {
        solo_mixed_request(&c->kinds[i], i, o->max_output);
        if (o->constrained_every != 0 && i % o->constrained_every == 1)
            pchaos_constrain(&c->kinds[i], i / o->constrained_every);
        failed = solo_run(&s, &c->kinds[i], &c->refs[i]) != 0;
    }
    solo_close(&s);
    c->n_slots = o->n_clients * o->per_client;
    c->reqs = calloc(c->n_slots, sizeof(*c->reqs));
    if (failed || c->reqs == NULL)
        return 1;
    if (o->doorbell_fault != NULL)
        setenv("RS_DOORBELL_FAULT", o->doorbell_fault, 1);
    struct rs_harness_opts ho = {0};
    ho.model = o->model;
    ho.n_ctx = o->n_ctx;
    ho.max_requests = 1024; /* a few hundred requests/s linger after their final */
    ho.ready_timeout_ms = 60000;
    if (o->linger_ms != NULL) {
        ho.extra[RS_PIPE_STAGE_POSTPROCD][0] = "--linger-ms";
        ho.extra[RS_PIPE_STAGE_POSTPROCD][1] = o->linger_ms;
    }
    if (rs_harness_start(&c->h, &ho) != RS_OK)
        return 1;
    for (uint32_t i = 0; i < o->n_clients; i++) {
        struct rs_client_opts co;
        rs_client_opts_default(&co);
        co.rundir = c->h.rundir;
        co.request_timeout_ms = 600000;
        if (rs_client_create(&co, &c->clients[i]) != RS_OK)
            return 1;
    }
    c->started_ms = rs_clock_ms();
    c->submitting = 1;
    return 0;
}

int pchaos_storm(struct pchaos *c, uint64_t ms)
{
    uint64_t end = rs_clock_ms() + ms;
    const struct pchaos_opts *o = &c->o;
    c->next_kill_ms = rs_clock_ms() + o->kill_min_ms;
    while (rs_clock_ms() < end) {
        if (pchaos_poll(c, 5) != 0)
            return 1;
        if (o->kill_max_ms == 0 || o->stage_mask == 0 || rs_clock_ms() < c->next_kill_ms)
            continue;
        if (pchaos_kill(c, pchaos_next_stage(c)) != 0)
            return 1;
        c->next_kill_ms =
            rs_clock_ms() + o->kill_min_ms + pchaos_rand(c) % (o->kill_max_ms - o->kill_min_ms + 1);
    }
    return 0;
}

int pchaos_drain(struct pchaos *c, uint32_t limit_ms)
{
    uint64_t end = rs_clock_ms() + limit_ms;
    c->submitting = 0;
    for (;;) {
        uint32_t left = 0;
        for (uint32_t i = 0; i < c->o.n_clients; i++)
            left += c->in_flight[i];
        if (left == 0)
            return 0;
        if (rs_clock_ms() >= end) {
            fprintf(stderr, "chaos: %u requests never finished\n", left);
            c->lost += left;
            return 1;
        }
        if (pchaos_poll(c, 20) != 0)
            return 1;
    }
}

int pchaos_audit(struct pchaos *c, struct rs_harness_audit *a)
{
    struct rs_table_stats ts = {0};
    for (uint64_t end = rs_clock_ms() + 40000; rs_clock_ms() < end;) {
        struct rs_pipe *v = rs_harness_view(&c->h);
        int ready = 1;
        for (int s = 0; s < RS_PIPE_N_STAGES; s++)
            ready &= rs_harness_ready_ns(&c->h, (enum rs_pipe_stage)s) != 0;
        if (ready && v != NULL && rs_table_check(v->requests, &ts) == RS_OK &&
            ts.n_state[RS_TABLE_FREE] == ts.n_records)
            break;
        if (pchaos_poll(c, 50) != 0)
            return 1;
    }
    pchaos_poll(c, 100); /* the last chunk unlinks, schedulerd's next gauges */
    return rs_harness_audit(&c->h, a);
}

void pchaos_client_stats(const struct pchaos *c, struct rs_client_stats *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (uint32_t i = 0; i < c->o.n_clients && c->clients[i] != NULL; i++) {
        struct rs_client_stats st;
        rs_client_stats(c->clients[i], &st);
        sum->duplicates += st.duplicates, sum->gaps += st.gaps, sum->resumes += st.resumes;
        sum->gen_resent += st.gen_resent, sum->reconnects += st.reconnects;
        sum->deltas += st.deltas;
    }
}

uint64_t pchaos_accepted(struct pchaos *c)
{
    struct rs_pipe *v = rs_harness_view(&c->h);
    return v != NULL ? atomic_load(&v->shared->next_handle) : 0;
}

void pchaos_print(struct pchaos *c, FILE *f)
{
    struct rs_client_stats cs;
    pchaos_client_stats(c, &cs);
    fprintf(f, "%-10s %6s %6s %6s %6s %6s %6s %7s %7s %7s %7s\n", "stage", "kills", "busy", "recov",
            "armed", "fp", "odd", "rst_p50", "rst_p99", "exe_p50", "exe_p99");
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        struct pchaos_stage *st = &c->st[s];
        fprintf(f, "%-10s %6u %6u %6u %6u %6u %6u %7.1f %7.1f %7.1f %7.1f\n",
                rs_pipe_stage_name((enum rs_pipe_stage)s), st->kills, st->kills_busy,
                st->kills_recovering, st->armed, st->failpoint_deaths, st->unexpected,
                pchaos_quantile_ms(&st->restart, 0.5), pchaos_quantile_ms(&st->restart, 0.99),
                pchaos_quantile_ms(&st->exec, 0.5), pchaos_quantile_ms(&st->exec, 0.99));
    }
    fprintf(f, "(busy: killed mid-work; recov: killed before READY; armed: starts with a "
               "failpoint; fp: deaths at it; odd: other exits; rst: kill -> READY ms; exe: exec -> "
               "READY ms)\n");
    fprintf(f,
            "requests: %llu submitted, %llu completed identical, %llu lost, %llu duplicated, "
            "%llu wrong; %llu handles taken by tokenizerd, %llu scans saw a request published "
            "twice\n",
            (unsigned long long)c->submitted, (unsigned long long)c->completed,
            (unsigned long long)c->lost, (unsigned long long)c->duplicated,
            (unsigned long long)c->wrong, (unsigned long long)pchaos_accepted(c),
            (unsigned long long)c->twice_live);
    fprintf(f,
            "clients: %llu deltas delivered, %llu repeats dropped, %llu gaps resumed (%llu "
            "resumes), %llu generates resent, %llu reconnects\n",
            (unsigned long long)cs.deltas, (unsigned long long)cs.duplicates,
            (unsigned long long)cs.gaps, (unsigned long long)cs.resumes,
            (unsigned long long)cs.gen_resent, (unsigned long long)cs.reconnects);
}

void pchaos_stop(struct pchaos *c, int keep_logs)
{
    for (uint32_t i = 0; i < PCHAOS_MAX_CLIENTS; i++)
        rs_client_destroy(&c->clients[i]);
    rs_harness_stop(&c->h, keep_logs);
    if (c->o.doorbell_fault != NULL)
        unsetenv("RS_DOORBELL_FAULT");
    for (uint32_t i = 0; i < c->n_slots; i++)
        rs_client_result_fini(&c->reqs[i].s.res);
    free(c->reqs);
    for (uint32_t i = 0; i < PCHAOS_MAX_KINDS; i++)
        solo_out_fini(&c->refs[i]);
    for (int s = 0; s < RS_PIPE_N_STAGES; s++) {
        free(c->st[s].restart.v);
        free(c->st[s].exec.v);
    }
    memset(c, 0, sizeof(*c));
}
