/* SPDX-License-Identifier: MIT */
/*
 * Metric names per stage (pipeline_metrics.h), built from the same X-macro
 * lists as the indices with designated initializers: a name sits at its
 * index whatever order the list is in.
 */
#include "ipc/pipeline_metrics.h"

#define NAME(index, name) [index] = name,
#define FITS(n, cap) _Static_assert((n) <= (cap), #n " exceeds the metrics block")

FITS(RS_M_TOK_N, RS_METRICS_COUNTERS);
FITS(RS_M_SCH_N, RS_METRICS_COUNTERS);
FITS(RS_M_LAU_N, RS_METRICS_COUNTERS);
FITS(RS_M_POST_N, RS_METRICS_COUNTERS);
FITS(RS_H_TOK_N, RS_METRICS_HISTS);
FITS(RS_H_SCH_N, RS_METRICS_HISTS);
FITS(RS_H_LAU_N, RS_METRICS_HISTS);
FITS(RS_H_POST_N, RS_METRICS_HISTS);

static const char *const counter_names[RS_PIPE_N_STAGES][RS_METRICS_COUNTERS] = {
    [RS_PIPE_STAGE_TOKENIZERD] = {RS_PIPE_TOK_COUNTERS(NAME)},
    [RS_PIPE_STAGE_SCHEDULERD] = {RS_PIPE_SCH_COUNTERS(NAME)},
    [RS_PIPE_STAGE_LAUNCHERD] = {RS_PIPE_LAU_COUNTERS(NAME)},
    [RS_PIPE_STAGE_POSTPROCD] = {RS_PIPE_POST_COUNTERS(NAME)},
};

static const char *const hist_names[RS_PIPE_N_STAGES][RS_METRICS_HISTS] = {
    [RS_PIPE_STAGE_TOKENIZERD] = {RS_PIPE_TOK_HISTS(NAME)},
    [RS_PIPE_STAGE_SCHEDULERD] = {RS_PIPE_SCH_HISTS(NAME)},
    [RS_PIPE_STAGE_LAUNCHERD] = {RS_PIPE_LAU_HISTS(NAME)},
    [RS_PIPE_STAGE_POSTPROCD] = {RS_PIPE_POST_HISTS(NAME)},
};

const char *rs_pipe_metric_name(enum rs_pipe_stage stage, int hist, unsigned i)
{
    if ((unsigned)stage >= RS_PIPE_N_STAGES)
        return NULL;
    if (hist)
        return i < RS_METRICS_HISTS ? hist_names[stage][i] : NULL;
    return i < RS_METRICS_COUNTERS ? counter_names[stage][i] : NULL;
}
