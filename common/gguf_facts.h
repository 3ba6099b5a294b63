/* SPDX-License-Identifier: MIT */
/*
 * The few facts about a model file that size a pipeline instance: its
 * absolute path and byte size (to notice another file under the same name),
 * its vocabulary size and its trained context length. Every daemon reads
 * them the same way, with this one function, so their configurations agree
 * field by field; the pipeline configuration (ipc/pipeline_config.h) takes
 * them as input and opens no file itself. Leaves out everything a stage
 * needs to run the model or its tokenizer (launcherd/engine, common/vocab.h).
 */
#ifndef RS_GGUF_FACTS_H
#define RS_GGUF_FACTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define RS_GGUF_FACTS_PATH_MAX 512 /* bytes of path, NUL included */

struct rs_gguf_facts {
    char path[RS_GGUF_FACTS_PATH_MAX]; /* absolute (realpath), NUL-terminated */
    uint64_t bytes;                    /* file size */
    uint32_t n_vocab;                  /* entries of tokenizer.ggml.tokens (1..2^31-1) */
    uint32_t n_ctx_train;              /* <general.architecture>.context_length; 0 = absent */
};

/*
 * Resolves `path`, stats it and reads the two metadata keys. RS_OK; RS_EIO
 * when the file cannot be resolved or read; RS_EINVAL when it is not a GGUF,
 * has no vocabulary, or an absolute path that does not fit (a missing
 * context length is n_ctx_train 0, for the caller to decide). err (err_len
 * bytes) names the file and the problem. Any thread.
 */
rs_err rs_gguf_facts_read(const char *path, struct rs_gguf_facts *out, char *err, size_t err_len);

#endif
