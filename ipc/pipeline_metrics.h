/* SPDX-License-Identifier: MIT */
/*
 * The pipeline's metrics region: one block of counters and histograms per
 * stage (common/metrics.h), and each stage's list of them. A list is an
 * X-macro of (index, name) pairs, so an index and its name are one entry:
 * inserting a metric cannot shift the names of the others, and the names
 * table is built from the same list with designated initializers.
 * ringserve-stat, ops tooling and tests read the names through
 * rs_pipe_metric_name. Leaves out what a figure means (each stage's README).
 */
#ifndef RS_PIPELINE_METRICS_H
#define RS_PIPELINE_METRICS_H

#include "common/metrics.h"
#include "ipc/pipeline_config.h"

/* X(index, name) per counter and histogram of each stage. */
#define RS_PIPE_TOK_COUNTERS(X)                                                                    \
    X(RS_M_TOK_RECEIVED, "requests_received")                                                      \
    X(RS_M_TOK_ACCEPTED, "requests_accepted")                                                      \
    X(RS_M_TOK_REJECTED, "requests_rejected")                                                      \
    X(RS_M_TOK_OVERLOADED, "requests_overloaded")                                                  \
    X(RS_M_TOK_DUPLICATES, "duplicates")                                                           \
    X(RS_M_TOK_CANCELS, "cancels")                                                                 \
    X(RS_M_TOK_PROMPT_TOKENS, "prompt_tokens")
#define RS_PIPE_TOK_HISTS(X)                                                                       \
    X(RS_H_TOK_TOKENIZE, "tokenize_us")                                                            \
    X(RS_H_TOK_INTAKE, "intake_us")

#define RS_PIPE_SCH_COUNTERS(X)                                                                    \
    X(RS_M_SCH_STEPS, "steps")                                                                     \
    X(RS_M_SCH_PREFILL_TOKENS, "prefill_tokens")                                                   \
    X(RS_M_SCH_DECODE_TOKENS, "decode_tokens")                                                     \
    X(RS_M_SCH_PREEMPTIONS, "preemptions")                                                         \
    X(RS_M_SCH_PREFIX_QUERY, "prefix_query_tokens")                                                \
    X(RS_M_SCH_PREFIX_HIT, "prefix_hit_tokens")                                                    \
    X(RS_M_SCH_FINISHED, "finished")                                                               \
    X(RS_M_SCH_KV_USED, "kv_blocks_used")                                                          \
    X(RS_M_SCH_KV_FREE, "kv_blocks_free")                                                          \
    X(RS_M_SCH_KV_CACHED, "kv_blocks_cached")                                                      \
    X(RS_M_SCH_WAITING, "waiting")                                                                 \
    X(RS_M_SCH_RUNNING, "running")                                                                 \
    X(RS_M_SCH_LAUNCHER_RESETS, "launcher_resets")                                                 \
    /* gauge: ns the latest step took to plan and write (exact) */                                 \
    X(RS_M_SCH_PLAN_NS_LAST, "plan_ns_last")                                                       \
    /* gauge: CLOCK_MONOTONIC when the latest result was applied */                                \
    X(RS_M_SCH_APPLIED_NS_LAST, "applied_ns_last")                                                 \
    /* gauge: prefill tokens the step-time budget allowed in the latest step */                  \
    /* (--max-batched-tokens when no budget applies) */                                          \
    X(RS_M_SCH_PREFILL_BUDGET_LAST, "prefill_budget_last")                                         \
    /* steps whose prefill the step-time budget held below the token budget */                   \
    X(RS_M_SCH_BUDGET_LIMITED, "budget_limited_steps")                                             \
    /* gauge: decodes one owner could run in the latest step (share.c; 0 = no limit) */          \
    X(RS_M_SCH_FAIR_LEVEL_LAST, "fair_level_last")                                                 \
    /* decodes put off to a later step because their owner was above the fair level */           \
    X(RS_M_SCH_FAIR_DEFERRED, "fair_deferred_decodes")                                             \
    /* steps the budget was lifted for: as many requests waited for a first token as streamed */ \
    X(RS_M_SCH_BUDGET_LIFTED, "budget_lifted_steps")
#define RS_PIPE_SCH_HISTS(X)                                                                       \
    X(RS_H_SCH_PLAN, "plan_us")                                                                    \
    X(RS_H_SCH_QUEUE_WAIT, "queue_wait_us")                                                        \
    X(RS_H_SCH_STEP, "step_us")

#define RS_PIPE_LAU_COUNTERS(X)                                                                    \
    X(RS_M_LAU_STEPS, "steps")                                                                     \
    X(RS_M_LAU_TOKENS, "tokens")                                                                   \
    X(RS_M_LAU_SAMPLED, "sampled")                                                                 \
    X(RS_M_LAU_KV_LOST, "kv_lost_batches")                                                         \
    X(RS_M_LAU_REJECTED, "rejected_batches")                                                       \
    X(RS_M_LAU_SEQ_ERRORS, "seq_errors")                                                           \
    X(RS_M_LAU_REDONE, "redone_tokens")                                                            \
    X(RS_M_LAU_FINISHED, "finished")                                                               \
    /* gauges: the step cost model fitted over the latest steps (common/step_cost.h), */         \
    /* read by schedulerd's step-time budget; cost_steps 0 = no fit yet */                       \
    X(RS_M_LAU_COST_FIXED_NS, "cost_fixed_ns")                                                     \
    X(RS_M_LAU_COST_PREFILL_PS, "cost_prefill_ps_per_token")                                       \
    X(RS_M_LAU_COST_DECODE_PS, "cost_decode_ps_per_token")                                         \
    X(RS_M_LAU_COST_STEPS, "cost_steps")                                                           \
    X(RS_M_LAU_MASK_ROWS, "mask_rows")                                                             \
    X(RS_M_LAU_MASK_WAITS, "mask_waits")
#define RS_PIPE_LAU_HISTS(X)                                                                       \
    X(RS_H_LAU_FORWARD, "forward_us")                                                              \
    X(RS_H_LAU_PICKUP, "pickup_us")                                                                \
    X(RS_H_LAU_SAMPLE, "sample_us")                                                                \
    X(RS_H_LAU_STEP, "step_us")                                                                    \
    X(RS_H_LAU_MASK, "mask_us")                                                                    \
    X(RS_H_LAU_MASK_WAIT, "mask_wait_us")

#define RS_PIPE_POST_COUNTERS(X)                                                                   \
    X(RS_M_POST_DELTAS, "deltas")                                                                  \
    X(RS_M_POST_FINALS, "finals")                                                                  \
    X(RS_M_POST_STOP_HITS, "stop_string_hits")                                                     \
    X(RS_M_POST_SEND_FAIL, "send_failures")                                                        \
    X(RS_M_POST_GONE, "clients_gone")                                                              \
    X(RS_M_POST_REPLAYS, "replays")
#define RS_PIPE_POST_HISTS(X)                                                                      \
    X(RS_H_POST_DETOK, "detokenize_us")                                                            \
    X(RS_H_POST_TTFT, "ttft_us")                                                                   \
    X(RS_H_POST_TPOT, "tpot_us")                                                                   \
    X(RS_H_POST_E2E, "e2e_us")

/* Counter and histogram indices per stage, from the lists above. */
#define RS_PIPE_METRIC_INDEX(index, name) index,
enum { RS_PIPE_TOK_COUNTERS(RS_PIPE_METRIC_INDEX) RS_M_TOK_N };
enum { RS_PIPE_TOK_HISTS(RS_PIPE_METRIC_INDEX) RS_H_TOK_N };
enum { RS_PIPE_SCH_COUNTERS(RS_PIPE_METRIC_INDEX) RS_M_SCH_N };
enum { RS_PIPE_SCH_HISTS(RS_PIPE_METRIC_INDEX) RS_H_SCH_N };
enum { RS_PIPE_LAU_COUNTERS(RS_PIPE_METRIC_INDEX) RS_M_LAU_N };
enum { RS_PIPE_LAU_HISTS(RS_PIPE_METRIC_INDEX) RS_H_LAU_N };
enum { RS_PIPE_POST_COUNTERS(RS_PIPE_METRIC_INDEX) RS_M_POST_N };
enum { RS_PIPE_POST_HISTS(RS_PIPE_METRIC_INDEX) RS_H_POST_N };
#undef RS_PIPE_METRIC_INDEX

/* The "metrics" region: one block per stage, in enum rs_pipe_stage order. */
struct rs_metrics_region {
    struct rs_metrics_block stage[RS_PIPE_N_STAGES];
};

/* Name of counter (hist = 0) or histogram (hist = 1) i of a stage; NULL past the last. */
const char *rs_pipe_metric_name(enum rs_pipe_stage stage, int hist, unsigned i);

#endif
