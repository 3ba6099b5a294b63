/* SPDX-License-Identifier: MIT */
/*
 * A generation for one HTTP request (a "call"): one pipeline request per
 * choice (n per prompt) through the client library, their events turned
 * into the OpenAI answer (streamed as SSE chunks, or collected into one
 * response), and what happens when the HTTP side goes away: without an
 * idempotency key the pipeline requests are cancelled (their KV freed); with
 * one they keep running for --reattach-grace-ms so a retry can take them
 * over (and after a gatewayd restart the retry re-submits the same content
 * under the same ids: tokenizerd acknowledges it again and postprocd
 * replays it from seq 0). The hand-off to the pipeline is gw_call_prepare:
 * the one place a parsed request becomes each choice's wire generate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "gatewayd/call_impl.h"

#define MS 1000000ull

/* --- hand-off to the pipeline ---------------------------------------------------------------- */

/*
 * The conversation as the pipeline's prompt: the messages, tools and
 * chat_template_kwargs the parser packed (oai_conv.c), which tokenizerd
 * renders with the model's chat template. The views borrow p->chat.
 */
static int chat_prompt(const struct gw_oai_req *p, struct rs_wire_generate *g, struct gw_err *e)
{
    if (p->chat == NULL || !(p->chat_gen.has & RS_WIRE_GEN_MESSAGES))
        return gw_err_set(e, 400, "messages", "'messages' is required");
    g->has |= p->chat_gen.has | RS_WIRE_GEN_ADD_GENERATION_PROMPT;
    g->messages = p->chat_gen.messages;
    g->tools = p->chat_gen.tools;
    g->template_kwargs = p->chat_gen.template_kwargs;
    g->add_generation_prompt = p->add_generation_prompt;
    return 0;
}

int gw_call_prepare(const struct gw_oai_req *p, uint32_t prompt_i, struct rs_wire_generate *g,
                    struct gw_err *e)
{
    *g = p->gen;
    g->has |= RS_WIRE_GEN_STREAM;
    g->stream = p->stream;
    if (p->logprobs) { /* the wire reports at least the token itself: 1 alternative */
        g->has |= RS_WIRE_GEN_LOGPROBS;
        g->logprobs = p->top_logprobs > 0 ? p->top_logprobs : 1;
    }
    if (gw_sampling_constraints(p, g, e) != 0)
        return -1;
    if (p->api == GW_API_CHAT)
        return chat_prompt(p, g, e);
    const struct gw_prompt *pr = &p->prompts[prompt_i];
    if (pr->is_ids) {
        g->has |= RS_WIRE_GEN_PROMPT_IDS;
        g->prompt_ids = (struct rs_wire_ids){.n = pr->n_ids, .vals = pr->ids};
    } else {
        g->has |= RS_WIRE_GEN_PROMPT;
        g->prompt = (struct rs_wire_str){pr->text, (uint32_t)pr->text_len};
    }
    return 0;
}

/* --- lifetime -------------------------------------------------------------------------------- */

static void orphan_unlink(struct gw *g, struct gw_call *c)
{
    for (struct gw_call **pp = &g->orphans; *pp != NULL; pp = &(*pp)->orphan_next)
        if (*pp == c) {
            *pp = c->orphan_next;
            break;
        }
    c->orphaned = false;
}

static void call_free(struct gw_call *c)
{
    struct gw *g = c->g;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        g->calls = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->keyed)
        gw_idem_remove(g, c);
    if (c->orphaned)
        orphan_unlink(g, c);
    for (uint32_t i = 0; i < c->n; i++) {
        gw_buf_free(&c->ch[i].text);
        if (c->ch[i].lp != NULL)
            json_decref(c->ch[i].lp);
    }
    g->st.calls--;
    gw_buf_free(&c->sse);
    gw_oai_req_free(&c->p);
    free(c->ch);
    free(c);
}

void call_unref(struct gw_call *c)
{
    if (c != NULL && --c->refs == 0)
        call_free(c);
}

void gw_call_free_all(struct gw *g)
{
    while (g->calls != NULL)
        call_free(g->calls);
}

static void cancel_live(struct gw_call *c)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->ch[i].live && !c->ch[i].done && rs_client_cancel(c->g->client, c->ch[i].id) == RS_OK)
            c->g->st.cancelled++;
}

void gw_call_detach(struct gw_call *c, bool client_left)
{
    struct gw *g = c->g;
    c->req = NULL;
    bool running = c->n_done < c->n;
    if (client_left && running && c->keyed && g->o.reattach_grace_ms > 0 && !c->orphaned) {
        c->orphan_until_ns = rs_clock_ns() + g->o.reattach_grace_ms * MS;
        c->orphan_next = g->orphans;
        g->orphans = c;
        c->orphaned = true;
        rs_log_info("call %s: client left; keeping it %u ms for a retry", c->stem,
                    g->o.reattach_grace_ms);
    } else if (running) {
        cancel_live(c); /* nobody reads it any more: free the KV blocks now */
    }
    call_unref(c);
}

uint64_t gw_call_timers(struct gw *g, uint64_t now)
{
    uint64_t due = UINT64_MAX;
    for (struct gw_call *c = g->orphans, *next; c != NULL; c = next) {
        next = c->orphan_next;
        if (now < c->orphan_until_ns) {
            due = c->orphan_until_ns < due ? c->orphan_until_ns : due;
            continue;
        }
        rs_log_info("call %s: no retry within the grace time: cancelled", c->stem);
        orphan_unlink(g, c);
        cancel_live(c);
    }
    return due;
}

/* --- starting -------------------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Every choice's generate and the hash of their encodings (what a retry must repeat). */
static int build_generates(struct gw_call *c, struct rs_wire_generate *gens, struct gw_err *e)
{
    struct rs_wire_buf buf;
    struct rs_wire_client_msg m;
    uint64_t h = 1469598103934665603ull;
    rs_wire_buf_init(&buf, RS_WIRE_CLIENT_MSG_MAX);
    for (uint32_t i = 0; i < c->n; i++) {
        struct gw_choice *ch = &c->ch[i];
        if (gw_call_prepare(&c->p, ch->prompt_i, &gens[i], e) != 0)
            break;
        if (c->p.n > 1 && (gens[i].has & RS_WIRE_GEN_SEED))
            gens[i].seed += i % c->p.n; /* n samples of one prompt must differ */
        memset(&m, 0, sizeof(m));
        m.type = RS_WIRE_T_GENERATE;
        snprintf(m.id, sizeof(m.id), "%s", ch->id);
        m.u.gen = gens[i];
        if (rs_wire_client_encode(&m, &buf) != RS_OK) {
            gw_err_set(e, 400, "", "the request cannot be encoded for the pipeline");
            break;
        }
        h = fnv(h, buf.data, buf.len);
    }
    rs_wire_buf_fini(&buf);
    c->hash = h;
    return e->status != 0 ? -1 : 0;
}

static struct gw_call *call_new(struct gw *g, struct gw_req *r, struct gw_oai_req *p,
                                const char *stem, bool keyed)
{
    struct gw_call *c = calloc(1, sizeof(*c));
    uint32_t n = gw_oai_n_choices(p);
    if (c == NULL || (c->ch = calloc(n, sizeof(*c->ch))) == NULL) {
        free(c);
        return NULL;
    }
    c->g = g;
    c->refs = 1;
    c->req = r;
    c->p = *p;
    memset(p, 0, sizeof(*p)); /* taken */
    c->keyed = keyed;
    c->n = n;
    c->created = (uint64_t)time(NULL);
    snprintf(c->stem, sizeof(c->stem), "%s", stem);
    snprintf(c->resp_id, sizeof(c->resp_id), "%s-%s", c->p.api == GW_API_CHAT ? "chatcmpl" : "cmpl",
             stem);
    for (uint32_t i = 0; i < n; i++) {
        struct gw_choice *ch = &c->ch[i];
        ch->call = c;
        ch->index = i;
        ch->prompt_i = i / c->p.n;
        if (n == 1)
            snprintf(ch->id, sizeof(ch->id), "%s", stem);
        else
            snprintf(ch->id, sizeof(ch->id), "%.48s.%u", stem, i);
    }
    c->next = g->calls;
    if (g->calls != NULL)
        g->calls->prev = c;
    g->calls = c;
    g->st.calls++;
    return c;
}

/* Choice i of c takes over the request the library still runs for another call. */
static int take_over(struct gw_call *c, struct gw_choice *ch)
{
    struct gw_call *old = gw_idem_find(c->g, c->stem);
    struct gw_choice *from = NULL;
    for (uint32_t i = 0; old != NULL && old != c && i < old->n; i++)
        if (old->ch[i].live && strcmp(old->ch[i].id, ch->id) == 0)
            from = &old->ch[i];
    if (from == NULL || rs_client_replay(c->g->client, ch->id, call_on_event, ch) != RS_OK)
        return -1;
    from->live = false;
    ch->live = true;
    c->refs++;
    call_unref(old);
    return 0;
}

static int submit_all(struct gw_call *c, const struct rs_wire_generate *gens, struct gw_err *e)
{
    struct gw *g = c->g;
    for (uint32_t i = 0; i < c->n; i++) {
        struct gw_choice *ch = &c->ch[i];
        struct rs_client_req_opts o = {.id = ch->id,
                                       .want_ack = true,
                                       .replay = c->keyed,
                                       .timeout_ms = g->o.request_timeout_ms};
        rs_err rc = rs_client_submit(g->client, &gens[i], &o, call_on_event, ch, NULL);
        if (rc == RS_OK) {
            ch->live = true;
            c->refs++;
        } else if (rc == RS_EEXIST && c->keyed && take_over(c, ch) == 0) {
            g->st.reattached++;
        } else {
            if (rc == RS_EFULL)
                gw_err_set(e, 429, "",
                           "%u requests in flight, the most this gateway holds; "
                           "retry later",
                           g->o.max_inflight);
            else
                gw_err_set(e, 500, "", "cannot submit to the pipeline: %s", rs_strerror(rc));
            cancel_live(c);
            return -1;
        }
    }
    return 0;
}

/* A call with the same key already here: the same content re-attaches, other content is 409. */
static int check_existing(struct gw *g, const struct gw_call *c, struct gw_err *e)
{
    struct gw_call *old = gw_idem_find(g, c->stem);
    if (old == NULL)
        return 0;
    if (old->hash != c->hash || old->n != c->n) {
        gw_err_set(e, 409, "", "this Idempotency-Key is in use by a different request");
        e->code = "idempotency_key_reused";
        return -1;
    }
    if (old->req != NULL) { /* its client retried on another connection: end the first one */
        call_fail(old, 409, "a retry with the same Idempotency-Key took over this request");
        old->superseded = true;
    }
    return 0;
}

int gw_call_start(struct gw *g, struct gw_req *r, struct gw_oai_req *p, const char *key,
                  struct gw_err *e)
{
    char identity[GW_IDENTITY_MAX], stem[RS_CLIENT_ID_CAP];
    memset(e, 0, sizeof(*e));
    if (key != NULL)
        gw_auth_identity(g, r, identity, sizeof(identity));
    gw_idem_stem(g, key != NULL ? identity : NULL, key, stem, sizeof(stem));
    struct gw_call *c = call_new(g, r, p, stem, key != NULL);
    struct rs_wire_generate *gens = c != NULL ? calloc(c->n, sizeof(*gens)) : NULL;
    if (gens == NULL) {
        call_unref(c);
        return gw_err_set(e, 500, "", "out of memory");
    }
    int rc = build_generates(c, gens, e);
    if (rc == 0 && c->keyed)
        rc = check_existing(g, c, e);
    if (rc == 0)
        rc = submit_all(c, gens, e);
    free(gens);
    if (rc != 0) {
        c->req = NULL;
        call_unref(c);
        return -1;
    }
    if (c->keyed)
        gw_idem_insert(g, c);
    r->call = c;
    return 0;
}
