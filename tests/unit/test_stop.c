/* SPDX-License-Identifier: MIT */
/* launcherd/engine/stop: finish reasons for EOS/EOT, stop ids, max_tokens, context; validation. */
#include <string.h>

#include "launcherd/engine/stop.h"
#include "tests/rs_test.h"

static const int32_t eog[2] = {2, 32007}; /* e.g. </s> and <|eot_id|> */

static struct rs_stop_params params(uint32_t max_tokens)
{
    struct rs_stop_params p;
    memset(&p, 0, sizeof(p));
    p.max_tokens = max_tokens;
    return p;
}

static int test_eog_ids_stop_unless_ignored(void)
{
    struct rs_stop_params p = params(100);
    RS_CHECK(rs_stop_check(&p, eog, 2, 2, 5, 1, 0) == RS_FINISH_STOP);
    RS_CHECK(rs_stop_check(&p, eog, 2, 32007, 5, 1, 0) == RS_FINISH_STOP);
    RS_CHECK(rs_stop_check(&p, eog, 2, 3, 5, 1, 0) == RS_FINISH_NONE);
    RS_CHECK(rs_stop_check(&p, NULL, 0, 2, 5, 1, 0) == RS_FINISH_NONE);
    p.ignore_eos = 1;
    RS_CHECK(rs_stop_check(&p, eog, 2, 2, 5, 1, 0) == RS_FINISH_NONE);
    return 0;
}

static int test_stop_ids_stop_even_with_ignore_eos(void)
{
    struct rs_stop_params p = params(100);
    p.ignore_eos = 1;
    p.n_stop_ids = 2;
    p.stop_ids[0] = 13;
    p.stop_ids[1] = 29889;
    p.stop_ids[2] = 7; /* beyond n_stop_ids: not a stop id */
    RS_CHECK(rs_stop_check(&p, eog, 2, 13, 0, 3, 0) == RS_FINISH_STOP);
    RS_CHECK(rs_stop_check(&p, eog, 2, 29889, 0, 3, 0) == RS_FINISH_STOP);
    RS_CHECK(rs_stop_check(&p, eog, 2, 7, 0, 3, 0) == RS_FINISH_NONE);
    p.n_stop_ids = 99; /* corrupt count from shared memory: ignored, never read past */
    RS_CHECK(rs_stop_check(&p, eog, 2, 13, 0, 3, 0) == RS_FINISH_NONE);
    return 0;
}

static int test_length_limits(void)
{
    struct rs_stop_params p = params(3);
    RS_CHECK(rs_stop_check(&p, eog, 2, 5, 10, 2, 0) == RS_FINISH_NONE);
    RS_CHECK(rs_stop_check(&p, eog, 2, 5, 10, 3, 0) == RS_FINISH_LENGTH);
    p.max_tokens = 1000;
    RS_CHECK(rs_stop_check(&p, eog, 2, 5, 10, 5, 16) == RS_FINISH_NONE);
    RS_CHECK(rs_stop_check(&p, eog, 2, 5, 10, 6, 16) == RS_FINISH_LENGTH); /* context full */
    /* A stop token at the last allowed position is a stop, not a length finish. */
    p.max_tokens = 3;
    RS_CHECK(rs_stop_check(&p, eog, 2, 2, 10, 3, 13) == RS_FINISH_STOP);
    RS_CHECK(strcmp(rs_finish_reason_name(RS_FINISH_STOP), "stop") == 0);
    RS_CHECK(strcmp(rs_finish_reason_name(RS_FINISH_LENGTH), "length") == 0);
    RS_CHECK(rs_finish_reason_name(RS_FINISH_NONE) == NULL);
    RS_CHECK(rs_finish_reason_name((enum rs_finish_reason)9) == NULL);
    return 0;
}

static int test_validate_names_the_field(void)
{
    char err[128];
    struct rs_stop_params p = params(16);
    p.n_stop_ids = 1;
    p.stop_ids[0] = 31999;
    RS_CHECK(rs_stop_params_validate(&p, 32000, err, sizeof(err)) == RS_OK);
    RS_CHECK(rs_stop_params_validate(&p, 31999, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strncmp(err, "stop_ids", 8) == 0);
    p.stop_ids[0] = -1;
    RS_CHECK(rs_stop_params_validate(&p, 32000, err, sizeof(err)) == RS_EINVAL);
    p = params(0);
    RS_CHECK(rs_stop_params_validate(&p, 32000, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strncmp(err, "max_tokens", 10) == 0);
    p = params(1);
    p.ignore_eos = 2;
    RS_CHECK(rs_stop_params_validate(&p, 32000, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strncmp(err, "ignore_eos", 10) == 0);
    p = params(1);
    p.n_stop_ids = 17;
    RS_CHECK(rs_stop_params_validate(&p, 32000, NULL, 0) == RS_EINVAL);
    p.n_stop_ids = -1;
    RS_CHECK(rs_stop_params_validate(&p, 32000, err, sizeof(err)) == RS_EINVAL);
    RS_CHECK(strncmp(err, "n_stop_ids", 10) == 0);
    return 0;
}

static const struct rs_test_case cases[] = {
    RS_TEST(test_eog_ids_stop_unless_ignored),
    RS_TEST(test_stop_ids_stop_even_with_ignore_eos),
    RS_TEST(test_length_limits),
    RS_TEST(test_validate_names_the_field),
};
RS_TEST_MAIN(cases)
