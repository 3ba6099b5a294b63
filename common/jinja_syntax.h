/* SPDX-License-Identifier: MIT */
/*
 * Tokens and the compile context shared by the chat-template lexer
 * (jinja_lex.c) and parser (jinja_parse.c). A compile error longjmps to
 * rs_jinja_compile with the position and message in the context.
 */
#ifndef RS_JINJA_SYNTAX_H
#define RS_JINJA_SYNTAX_H

#include "common/jinja_impl.h"

enum jtok {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
};

/* Operators, as Jinja's lexer names them. */
enum jtop {
    TO_ADD, TO_SUB, TO_DIV, TO_FLOORDIV, TO_MUL, TO_MOD, TO_POW, TO_TILDE,
    TO_LBRACKET, TO_RBRACKET, TO_LPAREN, TO_RPAREN, TO_LBRACE, TO_RBRACE,
    TO_EQ, TO_NE, TO_GT, TO_GE, TO_LT, TO_LE, TO_ASSIGN, TO_DOT, TO_COLON,
    TO_PIPE, TO_COMMA, TO_SEMICOLON,
};

struct jtoken {
    uint8_t type; /* enum jtok */
    uint8_t op;   /* enum jtop for T_OP */
    uint32_t line, col;
    const char *s; /* T_DATA, T_NAME, T_STRING: text (strings unescaped) */
    uint32_t n;
    int64_t i;
    double f;
};

struct jcomp {
    jmp_buf jb;
    jarena *ar;
    enum rs_jinja_errkind kind;
    unsigned line, col;
    char msg[512];
    unsigned depth; /* parser recursion */
};

_Noreturn void jcomp_fail(struct jcomp *c, unsigned line, unsigned col, enum rs_jinja_errkind kind,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Tokenizes src with transformers' settings (trim_blocks, lstrip_blocks, one final newline dropped). */
struct jtoken *jinja_lex(struct jcomp *c, const char *src, size_t len, size_t *n_tokens);

/* Parses tokens into t->body and t's symbol table. */
void jinja_parse(struct jcomp *c, rs_jinja *t, const struct jtoken *tok, size_t n);

#endif
